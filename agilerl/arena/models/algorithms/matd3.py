"""MATD3: multi-agent TD3 (multi-agent, off-policy)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.fields import policy_freq_field
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.registry import register


@register()
class MATD3Spec(MADDPGSpec):
    """Multi-Agent Twin Delayed DDPG."""

    policy_freq: int = policy_freq_field(2, "Critic updates per actor update.")
    policy_noise: float = Field(
        0.2, ge=0.0, description="Std of target-policy smoothing noise (continuous actions)."
    )
    noise_clip: float = Field(0.5, ge=0.0, description="Clip of target-policy smoothing noise.")
