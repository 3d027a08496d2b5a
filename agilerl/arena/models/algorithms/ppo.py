"""PPO and recurrent PPO (single-agent, on-policy)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.base import (
    SingleAgentAlgorithmSpec,
)
from agilerl.arena.models.algorithms.fields import (
    clip_coef_field,
    ent_coef_field,
    gae_lambda_field,
    lr_field,
    max_grad_norm_field,
    rollout_length_field,
    update_epochs_field,
    vf_coef_field,
)
from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import StochasticActorSpec
from agilerl.arena.models.registry import register


class LRScheduleSpec(StrictModel):
    """A learning-rate schedule over the run's ``max_steps``."""

    kind: Literal["constant", "linear"] = Field("linear", description="Schedule shape.")
    end: float = Field(0.0, ge=0.0, description="Learning rate reached at max_steps.")


@register()
class PPOSpec(SingleAgentAlgorithmSpec):
    """Proximal Policy Optimization."""

    num_envs: int = Field(1, ge=1, description="Parallel envs (copied from environment.num_envs).")
    learn_step: int = rollout_length_field(2048, "Rollout length summed over all envs.")
    lr: float = lr_field(3e-4)
    lr_schedule: LRScheduleSpec | None = Field(None, description="Learning-rate schedule.")
    gae_lambda: float = gae_lambda_field(0.95)
    action_std_init: float = Field(
        0.0, ge=0.0, description="Initial log-std of the Gaussian policy (Box actions)."
    )
    clip_coef: float = clip_coef_field(0.2)
    ent_coef: float = ent_coef_field(
        0.0, "Entropy bonus coefficient (0, the default, is never mutated)."
    )
    vf_coef: float = vf_coef_field(0.5)
    max_grad_norm: float = max_grad_norm_field(0.5)
    target_kl: float | None = Field(
        None,
        ge=0.0,
        description="Stop the update before a minibatch whose approximate KL exceeds "
        "1.5 * target_kl.",
    )
    update_epochs: int = update_epochs_field(10)
    rollout_buffer_config: dict[str, Any] | None = Field(
        None, description="Extra rollout-buffer settings."
    )
    recurrent: bool = Field(False, description="Use a recurrent (LSTM) policy.")
    max_seq_len: int | None = mutable_field(
        None, ge=1, low=4, high=256, grow=1.5, shrink=0.75,
        description="BPTT sequence length (recurrent); null: each env's whole rollout "
        "(mutated only where set).",
    )  # fmt: skip
    share_encoders: bool = Field(False, description="Actor and critic share one encoder.")
    normalize_advantages: bool = Field(True, description="Standardise advantages per minibatch.")
    normalize_rewards: bool = Field(
        False,
        description="Divide rewards by the running standard deviation of the discounted "
        "return (clipped to +-10), as SB3's VecNormalize(norm_reward=True); the statistics "
        "are saved with the agent. Reported returns stay the env's.",
    )
    value_clip_coef: float | None = Field(
        None, ge=0.0, description="Clip the value update around the rollout values; null: off."
    )
    adam_eps: float = Field(1e-5, gt=0.0, le=1e-2, description="Adam epsilon.")
    bptt_sequence_type: Literal["chunked", "maximum", "fifty_percent_overlap"] = Field(
        "chunked",
        description="Where BPTT sequences start: every max_seq_len steps (chunked), every "
        "max_seq_len // 2 (fifty_percent_overlap) or every step (maximum); never across episodes.",
    )
    net_config: StochasticActorSpec | None = Field(None, description="Network settings.")


@register("RecurrentPPO")
@register("Recurrent PPO")
class RecurrentPPOSpec(PPOSpec):
    """PPO with a recurrent policy; the name implies ``recurrent: true``."""

    alias_implies: ClassVar[dict[str, dict[str, Any]]] = {
        "RecurrentPPO": {"recurrent": True},
        "Recurrent PPO": {"recurrent": True},
    }

    recurrent: bool = Field(True, description="Recurrent PPO requires recurrent: true.")

    @model_validator(mode="after")
    def _requires_recurrent(self) -> RecurrentPPOSpec:
        if not self.recurrent:
            raise ValueError("Recurrent PPO requires recurrent=True; use name: PPO instead")
        return self
