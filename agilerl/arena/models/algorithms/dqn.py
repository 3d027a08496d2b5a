"""DQN (single-agent, off-policy, discrete actions)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from agilerl.arena.models.algorithms.base import DISCRETE, SingleAgentAlgorithmSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class DQNSpec(SingleAgentAlgorithmSpec):
    """Deep Q-Network, with an optional double-DQN target."""

    off_policy: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE

    learn_step: int = mutable_field(
        4, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Environment steps between learning updates.",
    )  # fmt: skip
    lr: float = mutable_field(
        1e-4, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Adam learning rate."
    )
    tau: float = mutable_field(
        0.005, ge=0.0, le=1.0, low=1e-3, high=0.1, description="Soft target-update rate."
    )
    double: bool = Field(True, description="Double DQN targets.")
    cudagraphs: Literal[False] = Field(
        False,
        description="Accepted for manifests of the public layout; CUDA-graph capture is not "
        "offered, so only false is valid.",
    )
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
