"""Builders: turn a validated spec into a live algorithm, dispatched on its paradigm."""

from __future__ import annotations

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.builders.base import AlgorithmBuilder
from agilerl.builders.llm import LLMBuilder
from agilerl.builders.multi_agent import MultiAgentBuilder
from agilerl.builders.runtime import AlgorithmBuildRuntime
from agilerl.builders.single_agent import SingleAgentBuilder


def select_builder(spec: AlgorithmSpec) -> type[AlgorithmBuilder]:
    """Return the builder class for ``spec``'s paradigm.

    Raises:
        TypeError: If ``spec`` is not one of the contract's algorithm specs.
    """
    if isinstance(spec, LLMAlgorithmSpec):
        return LLMBuilder
    if isinstance(spec, MultiAgentAlgorithmSpec):
        return MultiAgentBuilder
    if isinstance(spec, SingleAgentAlgorithmSpec):
        return SingleAgentBuilder
    raise TypeError(f"{type(spec).__name__} is not an algorithm spec")


__all__ = [
    "AlgorithmBuildRuntime",
    "AlgorithmBuilder",
    "LLMBuilder",
    "MultiAgentBuilder",
    "SingleAgentBuilder",
    "select_builder",
]
