"""CQN: conservative Q-learning from a fixed dataset (offline)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import DISCRETE, SingleAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import lr_field
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class CQNSpec(SingleAgentAlgorithmSpec):
    """Conservative Q-Network, trained offline from a dataset.

    The loss is the TD error plus ``conservative_weight`` times
    ``logsumexp_a Q(s, a) - Q(s, a_data)``, which pushes down the values of
    actions the dataset does not take; ``conservative_weight: 0`` is offline DQN.
    ``max_steps`` and ``evo_steps`` count gradient steps (there are no env steps).
    """

    offline: ClassVar[bool] = True
    env_type: ClassVar[str] = "offline"
    agent_type: ClassVar[str] = "offline_agent"
    default_evo_steps: ClassVar[int] = 5_000
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE

    lr: float = lr_field(1e-4)
    tau: float = mutable_field(
        0.001, gt=0.0, le=1.0, low=1e-4, high=0.1, description="Soft target-update rate."
    )
    double: bool = Field(False, description="Double-Q targets.")
    conservative_weight: float = mutable_field(
        1.0,
        ge=0.0,
        low=0.1,
        high=10.0,
        description="Weight of the conservative penalty (CQL alpha); 0 is offline DQN.",
    )
    max_grad_norm: float | None = Field(
        None, gt=0.0, description="Global gradient-norm clip; null for none."
    )
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
