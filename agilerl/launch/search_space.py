"""Search spaces for Bayesian sweeps, as validated data (no strings that get evaluated)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.errors import ConfigError, problems_from_validation


class FloatParam(StrictModel):
    """A real-valued hyperparameter."""

    type: Literal["float"] = Field(..., description="Kind of parameter.")
    low: float = Field(..., description="Lowest value.")
    high: float = Field(..., description="Highest value.")
    log: bool = Field(False, description="Sample on a log scale.")

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if self.low >= self.high or (self.log and self.low <= 0):
            raise ValueError("needs low < high (and low > 0 with log: true)")
        return self


class IntParam(StrictModel):
    """An integer hyperparameter."""

    type: Literal["int"] = Field(..., description="Kind of parameter.")
    low: int = Field(..., description="Lowest value.")
    high: int = Field(..., description="Highest value.")
    log: bool = Field(False, description="Sample on a log scale.")
    step: int = Field(1, ge=1, description="Spacing of values.")

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if self.low >= self.high or (self.log and self.low <= 0):
            raise ValueError("needs low < high (and low > 0 with log: true)")
        return self


class CategoricalParam(StrictModel):
    """A choice among listed values."""

    type: Literal["categorical"] = Field(..., description="Kind of parameter.")
    choices: list[Any] = Field(..., min_length=1, description="Values to choose from.")


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


def flatten_space(space: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{algorithm: {lr: {type: ...}}}`` -> ``{"algorithm.lr": {type: ...}}``."""
    flat: dict[str, Any] = {}
    for key, value in space.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and "type" not in value:
            flat.update(flatten_space(value, path))
        else:
            flat[path] = value
    return flat


def parse_search_space(
    space: dict[str, Any],
) -> dict[str, FloatParam | IntParam | CategoricalParam]:
    """Validate a (nested) search space.

    Raises:
        ConfigError: Naming the parameter and what is wrong.
    """
    flat = flatten_space(space)
    if not flat:
        raise ConfigError("hydra.sweeper.search_space is empty: name at least one parameter")
    adapter = TypeAdapter(dict[str, Param])
    try:
        return adapter.validate_python(flat)
    except ValidationError as exc:
        problems = problems_from_validation(exc)
        for problem in problems:
            object.__setattr__(problem, "path", f"hydra.sweeper.search_space.{problem.path}")
        raise ConfigError(problems) from None
