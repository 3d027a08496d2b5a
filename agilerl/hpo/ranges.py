"""Hyperparameter ranges of evolutionary HPO and the one rule that moves a value.

A range is ``(low, high, grow_factor, shrink_factor)``. By default it comes
from the spec field itself (``mutable_field``, see
:mod:`agilerl.arena.models.mutable`); the manifest's
``mutation.rl_hp_selection`` replaces those defaults for a run.

Every paradigm mutates through :func:`mutated_value`: the value is multiplied
by the factor *from where it is*, so a tuned value outside the exploration
range is never snapped to the range's edge (a DQN ``tau`` of 0.05 stays 0.05
x factor), and a value is never pushed further outside the range than it
already is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agilerl.arena.models.mutable import is_integer_field, mutation_range

__all__ = [
    "HpRange",
    "check_ranges",
    "declared_range",
    "integer_field",
    "movable",
    "mutated_value",
    "ranges_from_selection",
    "ranges_from_spec",
    "resolve_field_name",
]

HpRange = tuple[float, float, float, float]
"""``(low, high, grow_factor, shrink_factor)``."""


def check_ranges(ranges: Mapping[str, Any]) -> dict[str, HpRange]:
    """Validate and normalise ``{name: (low, high, grow, shrink)}``.

    Raises:
        ValueError: For a malformed range, ``low > high``, a grow factor below 1
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


def ranges_from_spec(spec: Any) -> dict[str, HpRange]:
    """The mutation ranges declared on the fields of a spec (class or instance)."""
    spec_cls = spec if isinstance(spec, type) else type(spec)
    return {name: span.as_tuple() for name, span in spec_cls.mutation_ranges().items()}


def resolve_field_name(spec: Any, name: str) -> str | None:
    """The spec field ``name`` refers to (itself or through an alias), or ``None``."""
    spec_cls = spec if isinstance(spec, type) else type(spec)
    fields = spec_cls.model_fields
    if name in fields:
        return name
    for field, info in fields.items():
        if name in (info.alias, info.validation_alias):
            return field
    return None


def integer_field(spec: Any, name: str) -> bool:
    """Whether the spec's field ``name`` holds an integer."""
    spec_cls = spec if isinstance(spec, type) else type(spec)
    info = spec_cls.model_fields.get(name)
    return info is not None and is_integer_field(info)


def declared_range(spec: Any, name: str) -> HpRange | None:
    """The range declared on the spec's field ``name`` (``None`` if it is not mutable)."""
    spec_cls = spec if isinstance(spec, type) else type(spec)
    info = spec_cls.model_fields.get(name)
    span = mutation_range(info) if info is not None else None
    return span.as_tuple() if span is not None else None


def movable(value: Any) -> bool:
    """Whether a multiplicative mutation can move ``value`` (a finite, non-zero number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)  # numpy scalars
        except (TypeError, ValueError):
            return False
    return math.isfinite(float(value)) and float(value) != 0.0


def mutated_value(old: float, span: HpRange, *, grow: bool, integer: bool) -> float | int:
    """``old`` grown or shrunk by its factor: the one clamp rule of every paradigm's mutations.

    The result is ``old * factor`` kept within ``[min(low, old), max(high, old)]``:
    inside the range a value stays inside it; a value outside it (a tuned
    setting) moves from where it is and is never pushed further out. When the
    drawn direction cannot move the value (it sits at that edge), the other
    direction is taken, so a mutation always changes something. An integer
    moves by at least one when the range allows it.

    Args:
        old: The current value.
        span: ``(low, high, grow_factor, shrink_factor)``.
        grow: Grow (else shrink) first.
        integer: Round to an integer.
    """
    first, second = (span[2], span[3]) if grow else (span[3], span[2])
    new = _moved(old, first, span, integer)
    if new == old:
        new = _moved(old, second, span, integer)
    return new


def _moved(old: float, factor: float, span: HpRange, integer: bool) -> float | int:
    low, high = float(span[0]), float(span[1])
    lo, hi = min(low, float(old)), max(high, float(old))
    value = min(max(float(old) * factor, lo), hi)
    if not integer:
        return float(value)
    new = round(value)
    if new == round(float(old)) and factor != 1.0:
        new += 1 if factor > 1.0 else -1
    return int(min(max(new, math.ceil(lo)), math.floor(hi)))
