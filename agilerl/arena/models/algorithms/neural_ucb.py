"""NeuralUCB: neural upper-confidence-bound exploration (contextual bandit)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.base import BanditSpec
from agilerl.arena.models.mutable import mutable_field
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class NeuralUCBSpec(BanditSpec):
    """Neural Upper Confidence Bound."""

    lr: float = mutable_field(
        0.001, ge=0.0, le=1.0, low=6.25e-5, high=1e-2, description="Adam learning rate."
    )
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
