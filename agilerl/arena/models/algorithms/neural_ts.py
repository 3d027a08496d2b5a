"""NeuralTS: neural Thompson sampling (contextual bandit)."""

from __future__ import annotations

from pydantic import Field

from agilerl.arena.models.algorithms.base import BanditSpec
from agilerl.arena.models.algorithms.fields import lr_field
from agilerl.arena.models.networks import QNetworkSpec
from agilerl.arena.models.registry import register


@register()
class NeuralTSSpec(BanditSpec):
    """Neural Thompson Sampling."""

    lr: float = lr_field(0.003)
    net_config: QNetworkSpec | None = Field(None, description="Network settings.")
