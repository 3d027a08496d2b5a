"""DPO: direct preference optimisation over a preference dataset."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.base import LLMAlgorithmSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


class DatasetLLMSpec(LLMAlgorithmSpec):
    """LLM algorithms trained teacher-forced over dataset rows (DPO, SFT)."""

    env_type: ClassVar[str] = "dataset"
    # Dataset rows can be packed (agilerl.llm.packing); rollout samples cannot.
    refused_fields: ClassVar[dict[str, str]] = {
        **{
            name: instead
            for name, instead in LLMAlgorithmSpec.refused_fields.items()
            if name != "use_sequence_packing"
        },
        **{
            name: f"{name} controls generation, and training on dataset rows generates "
            f"nothing; remove algorithm.{name}"
            for name in ("thinking_token_budget", "constrain_answer_pattern", "answer_continuation")
        },
    }

    @model_validator(mode="after")
    def _packing_needs_positions(self) -> DatasetLLMSpec:
        if self.use_sequence_packing and not self.calc_position_embeddings:
            raise ValueError(
                "use_sequence_packing keeps packed rows apart through their position ids; "
                "remove calc_position_embeddings: false"
            )
        return self


@register()
class DPOSpec(DatasetLLMSpec):
    """Direct Preference Optimization."""

    objective: ClassVar[str | None] = "preference"

    lr: float = mutable_field(
        5e-6, ge=0.0, le=1.0, low=1e-8, high=1e-3, description="Adam learning rate."
    )
    beta: float = mutable_field(
        0.1, ge=0.0, le=1.0, low=0.01, high=0.5, description="Preference temperature."
    )
    nll_alpha: float = Field(1.0, ge=0.0, description="Weight of the chosen-response NLL term.")
