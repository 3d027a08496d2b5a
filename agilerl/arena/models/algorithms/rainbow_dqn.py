"""Rainbow DQN (single-agent, off-policy, discrete actions)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.base import DISCRETE, SingleAgentAlgorithmSpec
from agilerl.arena.models.algorithms.fields import learn_step_field, lr_field, tau_field
from agilerl.arena.models.networks import RainbowQNetworkSpec
from agilerl.arena.models.registry import register


@register("Rainbow DQN")
@register()
class RainbowDQNSpec(SingleAgentAlgorithmSpec):
    """Rainbow: dueling, noisy, distributional (C51) DQN with n-step and PER."""

    off_policy: ClassVar[bool] = True
    supports_per_buffer: ClassVar[bool] = True
    action_space_kinds: ClassVar[frozenset[str]] = DISCRETE

    learn_step: int = learn_step_field(4)
    lr: float = lr_field(1e-4)
    tau: float = tau_field(0.005)
    beta: float = Field(
        0.4, ge=0.0, le=1.0, description="Initial PER importance-sampling exponent."
    )
    prior_eps: float = Field(
        1e-6, gt=0.0, le=1.0, description="Added to priorities so none is zero."
    )
    num_atoms: int = Field(51, ge=2, description="Atoms of the value distribution.")
    v_min: float = Field(0.0, ge=-1e6, le=1e6, description="Lowest value of the support.")
    v_max: float = Field(200.0, ge=-1e6, le=1e6, description="Highest value of the support.")
    noise_std: float = Field(0.5, ge=0.0, le=10.0, description="Initial std of the noisy layers.")
    n_step: int = Field(3, ge=1, description="Steps of the n-step return.")
    combined_reward: bool = Field(False, description="Mix one-step and n-step losses.")
    max_grad_norm: float | None = Field(
        10.0, ge=0.0, description="Global gradient-norm clip; null or 0 disables it."
    )
    net_config: RainbowQNetworkSpec | None = Field(None, description="Network settings.")

    @model_validator(mode="after")
    def _support(self) -> RainbowDQNSpec:
        if self.v_min >= self.v_max:
            raise ValueError(f"v_min ({self.v_min}) must be below v_max ({self.v_max})")
        return self
