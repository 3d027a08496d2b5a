"""CISPO: clipped IS-weight policy optimisation (GRPO's advantages, truncated token weights)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agilerl.arena.models.algorithms.grpo import GRPOSpec
from agilerl.arena.models.registry import register


@register()
class CISPOSpec(GRPOSpec):
    """Clipped IS-weight Policy Optimization: GRPO's group advantages with every token's
    gradient kept, weighted by its importance ratio truncated at ``1 + clip_coef`` (no
    gradient through the weight)."""

    loss_type: Literal["cispo"] = Field("cispo", description="The CISPO policy loss.")
