"""TD3 (single-agent, off-policy, continuous actions)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.ddpg import DeterministicPolicySpec
from agilerl.arena.models.registry import register


@register()
class TD3Spec(DeterministicPolicySpec):
    """Twin Delayed DDPG: clipped double critics, delayed actor, smoothed targets."""

    tau: float = Field(0.005, gt=0.0, le=1.0, description="Soft target-update rate.")
    policy_noise: float = Field(0.2, ge=0.0, description="Target policy smoothing noise std.")
    noise_clip: float = Field(0.5, ge=0.0, description="Clip of the smoothing noise.")
