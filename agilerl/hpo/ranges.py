"""Hyperparameter ranges for RL hyperparameter mutation.

A range is ``(min, max, grow_factor, shrink_factor)``. They come either from
the manifest's ``mutation.rl_hp_selection`` or from the algorithm spec's
``hpo_ranges`` (restricted to the hyperparameters that algorithm has).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

__all__ = [
    "INT_HYPERPARAMETERS",
    "HpRange",
    "algorithm_class_for_spec",
    "check_ranges",
    "ranges_from_selection",
    "ranges_from_spec",
]

HpRange = tuple[float, float, float, float]
"""``(min, max, grow_factor, shrink_factor)``."""

INT_HYPERPARAMETERS: frozenset[str] = frozenset(
    {
        "batch_size",
        "learn_step",
        "update_epochs",
        "policy_freq",
        "n_step",
        "num_atoms",
        "group_size",
        "max_seq_len",
    }
)
"""Hyperparameters that are always integers, whatever their current value's type."""


def check_ranges(ranges: Mapping[str, Any]) -> dict[str, HpRange]:
    """Validate and normalise ``{name: (min, max, grow, shrink)}``.

    Raises:
        ValueError: For a malformed range, ``min > max``, a grow factor below 1
            or a shrink factor outside ``[0, 1]``.
    """
    out: dict[str, HpRange] = {}
    for name, value in ranges.items():
        try:
            low, high, grow, shrink = (float(v) for v in value)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"Range of {name!r} must be (min, max, grow_factor, shrink_factor), got {value!r}"
            ) from exc
        if low > high:
            raise ValueError(f"Range of {name!r}: min ({low}) is greater than max ({high})")
        if grow < 1.0:
            raise ValueError(f"Range of {name!r}: grow_factor ({grow}) must be >= 1")
        if not 0.0 <= shrink <= 1.0:
            raise ValueError(f"Range of {name!r}: shrink_factor ({shrink}) must be in [0, 1]")
        out[str(name)] = (low, high, grow, shrink)
    return out


def ranges_from_selection(selection: Mapping[str, Any]) -> dict[str, HpRange]:
    """Convert ``mutation.rl_hp_selection`` (``RLHyperparameter`` models or dicts) to ranges."""
    out: dict[str, Any] = {}
    for name, hp in selection.items():
        if isinstance(hp, Mapping):
            grow, shrink = hp.get("grow_factor", 1.2), hp.get("shrink_factor", 0.8)
            out[name] = (hp["min"], hp["max"], grow, shrink)
        elif isinstance(hp, tuple | list):
            out[name] = tuple(hp)
        else:
            out[name] = (hp.min, hp.max, hp.grow_factor, hp.shrink_factor)
    return check_ranges(out)


def algorithm_class_for_spec(spec: Any) -> type | None:
    """The :class:`EvolvableAlgorithm` subclass a spec (class or instance) describes, if any.

    Matches the spec's registry name (``spec.name`` for an instance, the
    class name without ``Spec`` otherwise) against the algorithm classes.
    """
    import agilerl.algorithms  # noqa: F401  (registers the algorithm classes)
    from agilerl.algorithms.core.base import EvolvableAlgorithm

    spec_cls = spec if isinstance(spec, type) else type(spec)
    names = {spec_cls.__name__.removesuffix("Spec")}
    if not isinstance(spec, type):
        with contextlib.suppress(Exception):  # a name property may need missing state
            names.add(str(spec.name))
    stack = list(EvolvableAlgorithm.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__name__ in names:
            return cls
        stack.extend(cls.__subclasses__())
    return None


def ranges_from_spec(spec: Any) -> dict[str, HpRange]:
    """The spec's ``hpo_ranges`` restricted to hyperparameters the algorithm has.

    Names are kept when they are among the algorithm class's ``hp_names``
    (when the class is known) or else among the spec's fields.

    Args:
        spec: An algorithm spec class or instance.
    """
    spec_cls = spec if isinstance(spec, type) else type(spec)
    ranges = dict(getattr(spec_cls, "hpo_ranges", {}) or {})
    algo_cls = algorithm_class_for_spec(spec)
    if algo_cls is not None and getattr(algo_cls, "hp_names", ()):
        names = set(algo_cls.hp_names)
    else:
        names = set(getattr(spec_cls, "model_fields", {}))
    return check_ranges({k: v for k, v in ranges.items() if k in names})
