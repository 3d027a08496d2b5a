"""TD3 (single-agent, off-policy, continuous actions)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.ddpg import DeterministicPolicySpec
from agilerl.arena.models.algorithms.fields import batch_size_field
from agilerl.arena.models.registry import register


@register()
class TD3Spec(DeterministicPolicySpec):
    """Twin Delayed DDPG: clipped double critics, delayed actor, smoothed targets."""

    batch_size: int = batch_size_field(256)
    policy_noise: float = Field(
        0.2, ge=0.0, le=10.0, description="Target policy smoothing noise std."
    )
    noise_clip: float = Field(0.5, ge=0.0, le=10.0, description="Clip of the smoothing noise.")
