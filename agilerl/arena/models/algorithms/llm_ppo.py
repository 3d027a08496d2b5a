"""LLM PPO: PPO with a learned value head for LLM rollouts."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.base import RolloutLLMSpec, check_ratio_pooling
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


@register()
class LLMPPOSpec(RolloutLLMSpec):
    """Proximal Policy Optimization for language models."""

    refused_fields: ClassVar[dict[str, str]] = {
        **RolloutLLMSpec.refused_fields,
        "turn_level_clip": "ratios are clipped where importance_sampling_level takes them; "
        "set importance_sampling_level instead of turn_level_clip",
        "turn_value_reduction": "the value of a turn is the value at its last token; remove "
        "algorithm.turn_value_reduction",
        "use_memory_efficient_params": "the reference policy always shares the frozen base "
        "weights (LoRA adapters on one model); remove algorithm.use_memory_efficient_params",
    }

    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    beta: float = mutable_field(
        0.01, ge=0.0, le=1.0, low=1e-4, high=0.1, description="KL penalty coefficient."
    )
    max_grad_norm: float = Field(1.0, ge=0.0, description="Gradient clipping norm.")
    lr_actor: float = mutable_field(
        5e-7, ge=0.0, le=1.0, low=1e-8, high=1e-3, alias="lr", description="Actor learning rate."
    )
    lr_critic: float | None = Field(5e-5, ge=0.0, le=1.0, description="Value-head learning rate.")
    vf_coef: float = Field(
        0.25,
        ge=0.0,
        description="Value loss coefficient: the loss adds vf_coef * max((V - R)^2, "
        "(V_clipped - R)^2) per generated token (no 1/2, as PPO).",
    )
    clip_coef: float = Field(0.2, ge=0.0, le=1.0, description="Surrogate clipping range.")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount across turns.")
    gae_lambda: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda.")
    turn_level_clip: bool = Field(True, description="Clip ratios per turn.")
    whiten_advantages: bool = Field(True, description="Whiten advantages across the batch.")
    importance_sampling_level: Literal["auto", "token", "turn", "trajectory"] = Field(
        "auto",
        description="Where the importance ratio is taken: per token (auto, token), per "
        "assistant turn, or per trajectory.",
    )
    turn_ratio_pooling: Literal["sum", "mean"] = Field(
        "sum",
        description="How a turn's or trajectory's token log-ratios pool into its ratio: sum "
        "(the product of token ratios) or mean (length-normalised, as GSPO).",
    )
    turn_value_reduction: Literal["mean", "final_value"] = Field(
        "final_value", description="Value of a turn."
    )
    use_memory_efficient_params: bool = Field(True, description="Share frozen weights.")
    kl_clamp: float | None = Field(10.0, gt=0.0, description="Clamp per-token KL; null disables.")

    @model_validator(mode="after")
    def _pooling_needs_a_span(self) -> LLMPPOSpec:
        check_ratio_pooling(self.turn_ratio_pooling, self.importance_sampling_level)
        return self
