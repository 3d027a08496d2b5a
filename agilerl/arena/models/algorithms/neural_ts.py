"""NeuralTS: neural Thompson sampling (contextual bandit)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.base import BanditSpec
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class NeuralTSSpec(BanditSpec):
    """Neural Thompson Sampling."""

    lr: float = Field(0.003, ge=0.0, le=1.0, description="Adam learning rate.")
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
