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


def default_search_space(spec_cls: type) -> dict[str, Any]:
    """The search space of an algorithm unless ``hydra.sweeper.search_space`` is set.

    Built from the mutation ranges declared on the spec's fields (the same
    ranges evolutionary HPO explores): every mutable field whose default is set
    (``max_seq_len`` is left out while it is null), integers as ``int``, ranges
    spanning a large factor on a log scale.

    Raises:
        ConfigError: If the algorithm has no mutable field: the user has to name one.
    """
    from agilerl.arena.models.mutable import is_integer_field

    space: dict[str, Any] = {}
    for name, span in spec_cls.mutation_ranges().items():
        info = spec_cls.model_fields[name]
        if info.default is None or span.low == span.high:
            continue
        if is_integer_field(info):
            space[name] = {"type": "int", "low": int(span.low), "high": int(span.high)}
        else:
            space[name] = {"type": "float", "low": span.low, "high": span.high}
        space[name]["log"] = span.log_scale
    if not space:
        raise ConfigError(
            f"hydra.sweeper.search_space: {spec_cls.__name__.removesuffix('Spec')} declares no "
            "tunable field; name a space, nested like the manifest: "
            "hydra.sweeper.search_space='{algorithm: {lr: {type: float, low: 1e-4, high: 1e-2, "
            "log: true}}}'"
        )
    return {"algorithm": space}


def check_space_fields(space: dict[str, Any], manifest: Any) -> None:
    """Refuse a search space that names a field the manifest's sections do not have.

    Args:
        space: The flat space (``{"algorithm.lr": ...}``).
        manifest: The validated manifest of the sweep's fixed overrides.

    Raises:
        ConfigError: One problem per unknown path, with the closest field name.
    """
    from agilerl.arena.models.errors import Problem, did_you_mean, field_names

    problems: list[Problem] = []
    from agilerl.arena.models.manifest import TrainingManifest
    from agilerl.launch.overrides import SECTION_SPELLINGS

    for path in space:
        section, _, rest = path.partition(".")
        section = SECTION_SPELLINGS.get(section, section)
        head = rest.split(".", 1)[0]
        if section not in TrainingManifest.model_fields:
            guess = did_you_mean(section, list(TrainingManifest.model_fields))
            hint = f" (did you mean {guess}?)" if guess else ""
            problems.append(
                Problem(f"hydra.sweeper.search_space.{path}", f"{section!r} is not a section{hint}")
            )
            continue
        value = getattr(manifest, section, None)
        model = type(value) if value is not None else _section_model(section)
        if model is None:  # a section this manifest leaves out, of more than one kind
            continue
        names = field_names(model)
        if head not in names:
            guess = did_you_mean(head, names)
            hint = f" (did you mean {guess}?)" if guess else ""
            owner = getattr(value, "name", None) if section == "algorithm" else section
            problems.append(
                Problem(
                    f"hydra.sweeper.search_space.{path}",
                    f"{owner} has no field {head!r}{hint}; remove it from the search space",
                )
            )
    if problems:
        raise ConfigError(problems)


def _section_model(section: str) -> type | None:
    from agilerl.arena.models.manifest import TrainingManifest

    info = TrainingManifest.model_fields.get(section)
    if info is None:
        return None
    from agilerl.arena.models.errors import model_classes

    classes = model_classes(info.annotation)
    return classes[0] if len(classes) == 1 else None
