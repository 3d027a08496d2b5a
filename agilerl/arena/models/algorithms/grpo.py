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
    clip_coef: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Surrogate clipping range: the ratio is clipped to [1 - clip_coef, "
        "1 + clip_coef] (the lower bound only, with clip_coef_high set).",
    )
    clip_coef_high: float | None = Field(
        None,
        ge=0.0,
        description="Upper clipping range (clip-higher, DAPO's epsilon_high, e.g. 0.28): the "
        "ratio is clipped to [1 - clip_coef, 1 + clip_coef_high], so tokens the policy "
        "makes likelier keep their gradient longer; CISPO truncates its weights at "
        "1 + clip_coef_high. Null: symmetric, clip_coef both ways.",
    )
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
    loss_norm: Literal["micro_batch", "accumulation_window", "sequence", "max_length"] = Field(
        "micro_batch",
        description="What the summed token losses are divided by: each micro-batch's own "
        "generated tokens (micro_batch, TRL's bnpo; the mini-batch's loss is their mean), "
        "the whole mini-batch's (accumulation_window: DAPO's token-level mean), each "
        "sequence's own tokens then the mean over sequences (sequence: the original GRPO), "
        "or sequences x max_output_tokens, a constant (max_length: Dr. GRPO).",
    )
    mask_truncated_completions: bool = Field(
        False,
        description="DAPO's overlong filtering: completions cut by the length cap (no EOS or "
        "stop string; in an episode, any turn) get their group-relative advantage but stay "
        "out of the loss and its normaliser.",
    )
    overlong_buffer_len: int | None = Field(
        None,
        ge=1,
        description="DAPO's soft overlong punishment: a completion longer than "
        "max_output_tokens - overlong_buffer_len loses reward linearly, up to "
        "overlong_penalty_factor at max_output_tokens (per turn, before the advantages; "
        "needs max_output_tokens). Null: no penalty.",
    )
    overlong_penalty_factor: float = Field(
        1.0, ge=0.0, description="Reward lost by a completion that reaches max_output_tokens."
    )
    dynamic_sampling_max_rounds: int = Field(
        0,
        ge=0,
        description="DAPO's dynamic sampling: while fewer than batch_size groups have "
        "rewards that differ (beyond adv_filter_eps), generate up to this many extra rounds "
        "of batch_size new prompts and fill the batch with their varied groups (flat groups "
        "fill what is left; filter_zero_adv drops them). 0: off.",
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
            raise ValueError(
                "clip_coef must be a single number in [0, 1]: for asymmetric clipping set "
                "clip_coef to the lower range and clip_coef_high to the upper one"
            )
        return value

    @model_validator(mode="after")
    def _advantages_per_trajectory(self) -> GRPOSpec:
        if self.advantage_granularity == "turn":
            raise ValueError(
                "advantage_granularity=turn needs a reward per turn, and episodes carry one "
                "reward: use auto or trajectory"
            )
        return self

    @model_validator(mode="after")
    def _length_cap(self) -> GRPOSpec:
        cap, buffer = self.max_output_tokens, self.overlong_buffer_len
        if self.loss_norm == "max_length" and cap is None:
            raise ValueError("loss_norm=max_length divides by max_output_tokens: set it")
        if buffer is not None and (cap is None or buffer > cap):
            raise ValueError(
                f"overlong_buffer_len ({buffer}) is the last stretch before the generation "
                f"cap: set max_output_tokens (now {cap}) to at least it"
            )
        return self
