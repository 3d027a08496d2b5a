"""SAC (single-agent, off-policy, continuous actions)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from agilerl.arena.models.algorithms.base import (
    CONTINUOUS,
    SingleAgentAlgorithmSpec,
)
from agilerl.arena.models.algorithms.fields import (
    batch_size_field,
    gamma_field,
    learn_step_field,
    lr_field,
    policy_freq_field,
    tau_field,
)
from agilerl.arena.models.networks import StochasticActorSpec
from agilerl.arena.models.registry import register


@register()
class SACSpec(SingleAgentAlgorithmSpec):
    """Soft Actor-Critic: squashed Gaussian policy, twin critics, automatic entropy tuning.

    The warm-up before the first update is ``training.learning_delay``, as for TD3.
    """

    off_policy: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = CONTINUOUS

    batch_size: int = batch_size_field(256)
    learn_step: int = learn_step_field(1)
    gamma: float = gamma_field(0.99)
    lr_actor: float = lr_field(3e-4, "Actor learning rate.")
    lr_critic: float = lr_field(3e-4, "Critic learning rate.")
    lr_alpha: float = lr_field(3e-4, "Learning rate of the entropy temperature (log alpha).")
    tau: float = tau_field(0.005)
    policy_freq: int = policy_freq_field(1, "Critic updates per actor (and temperature) update.")
    learn_alpha: bool = Field(
        True, description="Tune the entropy temperature towards target_entropy; false keeps it."
    )
    alpha_init: float = Field(
        1.0, gt=0.0, le=100.0, description="Initial (or, with learn_alpha false, fixed) alpha."
    )
    target_entropy: float | None = Field(
        None,
        ge=-1000.0,
        le=1000.0,
        description="Entropy the temperature tunes towards; null for -action_dim.",
    )
    noise_correlation: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description=(
            "Temporal correlation rho of the policy's exploration noise while acting: each "
            "sub-env's standard-normal draw is rho * previous + sqrt(1 - rho^2) * fresh (a "
            "unit-variance Ornstein-Uhlenbeck process, restarted at episode ends), so samples "
            "keep a direction for about 1 / (1 - rho) steps; 0 draws afresh every step. For "
            "sparse rewards far away (MountainCarContinuous). Learning is unchanged."
        ),
    )
    share_encoders: bool = Field(
        False, description="Critics use the actor's encoder (trained by the critics only)."
    )
    net_config: StochasticActorSpec | None = Field(None, description="Network settings.")
