"""Algorithm base classes and checkpoint helpers."""

from __future__ import annotations

from agilerl.algorithms.core.base import (
    EvolvableAlgorithm,
    LLMAlgorithm,
    MultiAgentAlgorithm,
    SingleAgentAlgorithm,
    read_checkpoint,
    space_from_dict,
    space_to_dict,
)

__all__ = [
    "EvolvableAlgorithm",
    "LLMAlgorithm",
    "MultiAgentAlgorithm",
    "SingleAgentAlgorithm",
    "read_checkpoint",
    "space_from_dict",
    "space_to_dict",
]
