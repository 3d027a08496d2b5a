"""MATD3: multi-agent TD3 (multi-agent, off-policy)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


@register()
class MATD3Spec(MADDPGSpec):
    """Multi-Agent Twin Delayed DDPG."""

    policy_freq: int = mutable_field(
        2, ge=1, low=1, high=10, grow=1.5, shrink=0.75,
        description="Critic updates per actor update.",
    )  # fmt: skip
    policy_noise: float = Field(
        0.2, ge=0.0, description="Std of target-policy smoothing noise (continuous actions)."
    )
    noise_clip: float = Field(0.5, ge=0.0, description="Clip of target-policy smoothing noise.")
