"""The paradigm-keyed factory that turns a spec into a live algorithm."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from agilerl.arena.models.algorithms import (
    AlgorithmSpec,
    LLMAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    SingleAgentAlgorithmSpec,
)
from agilerl.builders.runtime import AlgorithmBuildRuntime

_PARADIGM_BASES = (
    AlgorithmSpec,
    SingleAgentAlgorithmSpec,
    MultiAgentAlgorithmSpec,
    LLMAlgorithmSpec,
)


class AlgorithmBuilder:
    """Paradigm-keyed factory that builds a live algorithm from a spec.

    Concrete builders own the paradigm-specific build signature; the callers
    dispatch on paradigm and call the concrete class directly.
    """

    required_base: str = "EvolvableAlgorithm"

    @classmethod
    def algo_class(cls, spec: AlgorithmSpec) -> type:
        """Resolve the algorithm class from :mod:`agilerl.algorithms`.

        Naming convention: ``<Name>Spec -> <Name>``. Walks the spec's MRO so a
        user subclass still maps to the parent algorithm.

        Raises:
            AttributeError: If no algorithm matches the spec's name.
        """
        algorithms = importlib.import_module("agilerl.algorithms")
        from agilerl.algorithms.core.base import EvolvableAlgorithm

        tried = []
        for klass in type(spec).__mro__:
            if klass in _PARADIGM_BASES or not isinstance(klass, type):
                break
            if not klass.__name__.endswith("Spec"):
                continue
            name = klass.__name__.removesuffix("Spec")
            tried.append(name)
            found = getattr(algorithms, name, None)
            if isinstance(found, type) and issubclass(found, EvolvableAlgorithm):
                return found
        hint = (
            " (LLM algorithms need the llm extra: pip install 'agilerl[llm]')"
            if isinstance(spec, LLMAlgorithmSpec)
            else ""
        )
        raise AttributeError(
            f"No algorithm class for {type(spec).__name__} in agilerl.algorithms "
            f"(looked for {', '.join(tried) or 'nothing'}){hint}"
        )

    @classmethod
    def checked_class(cls, spec: AlgorithmSpec) -> type:
        """:meth:`algo_class`, checked against the paradigm's algorithm base class."""
        algo_cls = cls.algo_class(spec)
        from agilerl.algorithms.core import base

        required = getattr(base, cls.required_base)
        if not issubclass(algo_cls, required):
            raise TypeError(f"{algo_cls.__name__} is not a subclass of {required.__name__}")
        return algo_cls


def apply_checkpoint(algo: Any, spec: AlgorithmSpec, runtime: AlgorithmBuildRuntime) -> Any:
    """Load weights or a whole checkpoint into a freshly built algorithm.

    Raises:
        ValueError: If both ``resume_from_checkpoint`` and ``load_weights_from`` are set.
    """
    resume, weights = runtime.resume_from_checkpoint, runtime.load_weights_from
    if resume and weights:
        raise ValueError("set only one of resume_from_checkpoint and load_weights_from")
    if weights:
        algo.load_weights(weights)
    elif resume:
        configured = {
            k: getattr(spec, k)
            for k in spec.model_fields_set
            if isinstance(getattr(spec, k, None), bool | int | float | str)
        }
        algo.load_checkpoint(resume)
        if runtime.index is not None:
            algo.index = runtime.index
        drift = [
            f"{k}: spec {v!r}, checkpoint {getattr(algo.spec, k)!r}"
            for k, v in configured.items()
            if getattr(algo.spec, k) != v
        ]
        if drift:
            warnings.warn(
                "checkpoint values differ from the spec (checkpoint wins): " + "; ".join(drift),
                UserWarning,
                stacklevel=3,
            )
    return algo


def build_rl(
    builder: type[AlgorithmBuilder],
    spec: AlgorithmSpec,
    spaces: dict[str, Any],
    runtime: AlgorithmBuildRuntime | None,
    networks: dict[str, Any],
) -> Any:
    """Shared body of the single- and multi-agent builders.

    Args:
        builder: The paradigm's builder (checks the algorithm's base class).
        spec: The algorithm spec.
        spaces: The observation and action space arguments, by constructor name.
        runtime: Population slot, device, HPO, checkpoint and run length.
        networks: Pre-built modules to hand the constructor.

    Raises:
        ValueError: Naming every missing space and ``runtime.index``.
    """
    runtime = runtime or AlgorithmBuildRuntime()
    missing = [name for name, value in spaces.items() if value is None]
    if runtime.index is None:
        missing.append("runtime.index")
    if missing:
        raise ValueError(f"{builder.__name__}.build needs {', '.join(missing)}")
    algo_cls = builder.checked_class(spec)
    extra: dict[str, Any] = {k: v for k, v in networks.items() if v is not None}
    if runtime.accelerator is not None:
        extra["accelerator"] = runtime.accelerator
    algo = algo_cls(
        spec,
        **spaces,
        index=runtime.index,
        device=runtime.device,
        total_steps=runtime.total_steps,
        **extra,
    )
    return apply_checkpoint(algo, spec, runtime)
