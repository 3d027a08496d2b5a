"""NeuralUCB: neural upper-confidence-bound exploration (contextual bandit)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.base import BanditSpec
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class NeuralUCBSpec(BanditSpec):
    """Neural Upper Confidence Bound."""

    lr: float = Field(0.001, ge=0.0, le=1.0, description="Adam learning rate.")
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
