"""CQN: conservative Q-learning from a fixed dataset (offline)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import DISCRETE, SingleAgentAlgorithmSpec
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class CQNSpec(SingleAgentAlgorithmSpec):
    """Conservative Q-Network, trained offline from a dataset."""

    offline: ClassVar[bool] = True
    env_type: ClassVar[str] = "offline"
    agent_type: ClassVar[str] = "offline_agent"
    default_evo_steps: ClassVar[int] = 5_000
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE

    lr: float = Field(1e-4, ge=0.0, le=1.0, description="Adam learning rate.")
    tau: float = Field(0.001, gt=0.0, le=1.0, description="Soft target-update rate.")
    double: bool = Field(False, description="Double-Q targets.")
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
