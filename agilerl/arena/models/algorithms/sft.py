"""SFT: supervised fine-tuning on prompt/response rows."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from agilerl.arena.models.algorithms.dpo import DatasetLLMSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.registry import register


@register()
class SFTSpec(DatasetLLMSpec):
    """Supervised fine-tuning (next-token loss on the response)."""

    objective: ClassVar[str | None] = "sft"

    lr: float = mutable_field(
        5e-5, ge=0.0, le=1.0, low=1e-8, high=1e-3, description="Adam learning rate."
    )
    use_separate_reference_adapter: bool = Field(
        False, description="SFT needs no reference policy."
    )

    @model_validator(mode="after")
    def _no_offload(self) -> SFTSpec:
        if self.activation_offload:
            raise ValueError(
                "activation_offload: SFT does not offload activations; remove it and keep "
                "algorithm.gradient_checkpointing: true to cut activation memory"
            )
        return self
