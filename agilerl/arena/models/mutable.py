"""Mutable hyperparameters: the exploration range lives on the spec field itself.

A spec field that evolutionary HPO may change is declared with
:func:`mutable_field` instead of ``Field``. Besides the default, the validation
bounds and the description, it carries a :class:`MutationRange`::

    tau: float = mutable_field(0.005, ge=0.0, le=1.0, low=1e-4, high=0.1,
                               description="Soft target-update rate.")

The range is where a fresh search explores (initial populations, default
Optuna search spaces) and how far one mutation moves a value (its grow and
shrink factors). It sits inside the validation bounds (a registry-wide test
checks it) and it is published in the JSON schema under ``x-mutation``.

Pure data: nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import Field
from pydantic.fields import FieldInfo

__all__ = [
    "LOG_SCALE_RATIO",
    "MutationRange",
    "is_integer_field",
    "mutable_field",
    "mutation_range",
]

SCHEMA_KEY = "x-mutation"
"""Key of the range in a field's ``json_schema_extra``."""

LOG_SCALE_RATIO = 20.0
"""A positive range whose ``high / low`` reaches this is explored on a log scale."""


@dataclass(frozen=True)
class MutationRange:
    """Where a mutable hyperparameter is explored and how one mutation moves it.

    Attributes:
        low: Lowest value a search explores.
        high: Highest value a search explores.
        grow: Factor of a growing mutation (>= 1).
        shrink: Factor of a shrinking mutation (in ``(0, 1]``).
    """

    low: float
    high: float
    grow: float = 1.2
    shrink: float = 0.8

    def __post_init__(self) -> None:
        values = (self.low, self.high, self.grow, self.shrink)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ValueError(f"mutation range values must be finite numbers, got {values}")
        if self.low > self.high:
            raise ValueError(f"mutation range: low ({self.low}) is above high ({self.high})")
        if self.grow < 1.0:
            raise ValueError(f"mutation range: grow ({self.grow}) must be >= 1")
        if not 0.0 < self.shrink <= 1.0:
            raise ValueError(f"mutation range: shrink ({self.shrink}) must be in (0, 1]")

    @property
    def log_scale(self) -> bool:
        """Whether a search draws this range on a log scale (it spans a large factor)."""
        return self.low > 0 and self.high / self.low >= LOG_SCALE_RATIO

    def as_tuple(self) -> tuple[float, float, float, float]:
        """``(low, high, grow, shrink)``."""
        return (self.low, self.high, self.grow, self.shrink)

    def as_dict(self) -> dict[str, float]:
        """The range as plain data (what the JSON schema shows)."""
        return {"low": self.low, "high": self.high, "grow": self.grow, "shrink": self.shrink}


def mutable_field(
    default: Any,
    *,
    low: float,
    high: float,
    grow: float = 1.2,
    shrink: float = 0.8,
    description: str,
    **field_kwargs: Any,
) -> Any:
    """A pydantic ``Field`` that evolutionary HPO may mutate within ``[low, high]``.

    Args:
        default: The field's default.
        low: Lowest value a search explores.
        high: Highest value a search explores.
        grow: Factor of a growing mutation.
        shrink: Factor of a shrinking mutation.
        description: What the field means.
        **field_kwargs: Further ``Field`` arguments (``ge``, ``le``, ``gt``, ``alias``...).
    """
    span = MutationRange(float(low), float(high), float(grow), float(shrink))
    return Field(
        default, description=description, json_schema_extra={SCHEMA_KEY: span.as_dict()},
        **field_kwargs,
    )  # fmt: skip


def mutation_range(info: FieldInfo) -> MutationRange | None:
    """The field's mutation range, or ``None`` when the field is not mutable."""
    extra = info.json_schema_extra
    if not isinstance(extra, dict) or SCHEMA_KEY not in extra:
        return None
    data = extra[SCHEMA_KEY]
    return MutationRange(data["low"], data["high"], data["grow"], data["shrink"])


def is_integer_field(info: FieldInfo) -> bool:
    """Whether the field holds an integer (``int`` or ``int | None``, not ``bool``)."""
    annotation = info.annotation
    if annotation is int:
        return True
    args = get_args(annotation)
    return int in args and float not in args
