"""GRPO: group-relative policy optimisation for LLMs (rollout fine-tuning)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from agilerl.arena.models.algorithms.base import RolloutLLMSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


@register()
class GRPOSpec(RolloutLLMSpec):
    """Group Relative Policy Optimization: advantages relative to a prompt's group."""

    refused_fields: ClassVar[dict[str, str]] = {
        **RolloutLLMSpec.refused_fields,
        "use_memory_efficient_params": "the reference policy always shares the frozen base "
        "weights (LoRA adapters on one model); remove algorithm.use_memory_efficient_params",
        "turn_advantage_trajectory_fallback": "advantages are per trajectory, so there is "
        "nothing to fall back from; remove algorithm.turn_advantage_trajectory_fallback",
    }

    group_size: int = mutable_field(
        ...,
        ge=1,
        low=2,
        high=64,
        grow=1.5,
        shrink=0.75,
        description="Completions sampled per prompt (required: no default fits all).",
    )
    lr: float = mutable_field(
        5e-7, ge=0.0, le=1.0, low=1e-8, high=1e-3, description="Adam learning rate."
    )
    clip_coef: float = Field(0.2, ge=0.0, le=1.0, description="Surrogate clipping range.")
    adv_norm: Literal["mean_only", "mean_std"] = Field(
        "mean_only", description="Advantage normalisation within a group."
    )
    use_kl_advantage_shaping: bool = Field(
        False,
        description="Subtract beta x the per-token KL from the advantages (no gradient) "
        "instead of adding beta x KL to the loss.",
    )
    importance_sampling_level: Literal["token", "turn", "trajectory"] | None = Field(
        None,
        description="Where the importance ratio is taken: per token (null, GRPO), per "
        "assistant turn, or per trajectory (GSPO: exp of the mean token log-ratio).",
    )
    advantage_granularity: Literal["auto", "trajectory", "turn"] = Field(
        "auto",
        description="Advantage per trajectory or per turn; auto and trajectory give each "
        "sequence its group-relative advantage (turn needs per-turn rewards: refused).",
    )
    whiten_advantages: bool = Field(False, description="Whiten advantages across the batch.")
    adv_clip_range: float | None = Field(None, ge=0.0, description="Clip advantages to this.")
    filter_zero_adv: bool = Field(False, description="Drop groups whose rewards are all equal.")
    adv_filter_eps: float = Field(0.0, ge=0.0, description="Tolerance of that filter.")
    use_memory_efficient_params: bool = Field(True, description="Share frozen weights.")
    turn_advantage_trajectory_fallback: bool = Field(
        True, description="Fall back to trajectory advantages for single turns."
    )
    loss_norm: Literal["micro_batch", "accumulation_window"] = Field(
        "micro_batch",
        description="Token normalisation of the loss: each micro-batch by its own generated "
        "tokens (micro_batch; the mini-batch's loss is their mean), or every micro-batch "
        "by the whole mini-batch's (accumulation_window).",
    )
    off_policy_token_mask_bounds: tuple[float, float] | None = Field(
        (0.5, 5.0), description="Mask tokens whose ratio leaves these bounds; null disables."
    )
    off_policy_sequence_mask_threshold: float | None = Field(
        0.03,
        ge=0.0,
        description="Drop from the loss sequences with a negative advantage whose mean "
        "KL(old || current policy) per token exceeds this; null disables.",
    )
    use_bias_correction_kl: bool = Field(True, description="Bias-corrected KL estimator.")
    kl_clamp: float | None = Field(10.0, gt=0.0, description="Clamp per-token KL; null disables.")

    @field_validator("clip_coef", mode="before")
    @classmethod
    def _scalar_clip(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            raise ValueError("clip_coef must be a single number in [0, 1]")
        return value

    @model_validator(mode="after")
    def _advantages_per_trajectory(self) -> GRPOSpec:
        if self.advantage_granularity == "turn":
            raise ValueError(
                "advantage_granularity=turn needs a reward per turn, and episodes carry one "
                "reward: use auto or trajectory"
            )
        return self
