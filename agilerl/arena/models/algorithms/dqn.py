"""DQN (single-agent, off-policy, discrete actions)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agilerl.arena.models.algorithms.base import DISCRETE, SingleAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import learn_step_field, lr_field, tau_field
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class DQNSpec(SingleAgentAlgorithmSpec):
    """Deep Q-Network, with an optional double-DQN target."""

    off_policy: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE
    uses_epsilon: ClassVar[bool] = True

    learn_step: int = learn_step_field(4)
    lr: float = lr_field(1e-4)
    tau: float = tau_field(0.005)
    double: bool = Field(True, description="Double DQN targets.")
    cudagraphs: Literal[False] = Field(
        False,
        description="Accepted for manifests of the public layout; CUDA-graph capture is not "
        "offered, so only false is valid.",
    )
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
