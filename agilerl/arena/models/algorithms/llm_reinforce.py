"""LLM REINFORCE: policy-gradient fine-tuning from rollout rewards."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.base import RolloutLLMSpec, check_ratio_pooling
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


@register()
class LLMREINFORCESpec(RolloutLLMSpec):
    """REINFORCE with importance-ratio clipping for language models."""

    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature.")
    beta: float = mutable_field(
        0.01, ge=0.0, le=1.0, low=1e-4, high=0.1, description="KL penalty coefficient."
    )
    max_grad_norm: float = Field(1.0, ge=0.0, description="Gradient clipping norm.")
    lr: float = mutable_field(
        5e-7, ge=0.0, le=1.0, low=1e-8, high=1e-3, description="Adam learning rate."
    )
    clip_coef: float = Field(0.2, ge=0.0, le=1.0, description="Ratio clipping range.")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount across turns.")
    importance_sampling_level: Literal["token", "turn", "trajectory"] = Field(
        "token",
        description="Where the importance ratio is taken: per token, per assistant turn, or "
        "per trajectory.",
    )
    turn_ratio_pooling: Literal["sum", "mean"] = Field(
        "sum",
        description="How a turn's or trajectory's token log-ratios pool into its ratio: sum "
        "(the product of token ratios) or mean (length-normalised, as GSPO).",
    )

    @model_validator(mode="after")
    def _pooling_needs_a_span(self) -> LLMREINFORCESpec:
        check_ratio_pooling(self.turn_ratio_pooling, self.importance_sampling_level)
        return self
