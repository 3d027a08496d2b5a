"""GSPO: group sequence policy optimisation (GRPO with sequence-level importance ratios)."""

from __future__ import annotations

from pydantic import model_validator

from agilerl.arena.models.algorithms.grpo import GRPOSpec
from agilerl.arena.models.registry import register


@register()
class GSPOSpec(GRPOSpec):
    """Group Sequence Policy Optimization: GRPO with one importance ratio per completion.

    The ratio is ``exp`` of the mean token log-ratio of the completion (null
    ``importance_sampling_level`` means ``trajectory`` here; ``turn`` takes one
    per assistant turn).
    """

    @model_validator(mode="after")
    def _sequence_level(self) -> GSPOSpec:
        if self.importance_sampling_level == "token":
            raise ValueError(
                "importance_sampling_level=token is GRPO's ratio: use algorithm=grpo, or "
                "trajectory / turn for GSPO"
            )
        return self
