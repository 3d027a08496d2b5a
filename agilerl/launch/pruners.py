"""The Optuna sweeper's pruner (``hydra.sweeper.pruner``), as validated data.

A pruner stops a trial early when its evaluations trail the other trials'. Its
steps are a member's steps at each evaluation, in the unit of
``training.max_steps`` (env steps for RL), so a warm-up reads like a budget.
Each kind takes only its own settings; a setting of another kind is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from agilerl.arena.models.base import StrictModel
from agilerl.arena.models.errors import ConfigError, did_you_mean, problems_from_validation

PRUNER_PATH = "hydra.sweeper.pruner"


class NoPruner(StrictModel):
    """Every trial runs its whole budget (its evaluations are still reported)."""

    kind: Literal["none"] = Field("none", description="No pruning.")


class MedianPrunerSettings(StrictModel):
    """Stop a trial whose best evaluation so far is below the median of the other trials'
    evaluations at the same step (Optuna's ``MedianPruner``)."""

    kind: Literal["median"] = Field(..., description="Median stopping rule.")
    n_startup_trials: int = Field(
        5, ge=0, description="Trials that finish before any trial can be pruned."
    )
    n_warmup_steps: int = Field(
        0, ge=0, description="Steps (per member) a trial runs before it can be pruned."
    )
    interval_steps: int = Field(
        1, ge=1, description="Steps between pruning checks once the warm-up is over."
    )
    n_min_trials: int = Field(
        1, ge=1, description="Other trials that must have reported at a step to compare with."
    )


class SuccessiveHalvingSettings(StrictModel):
    """Keep the best ``1/reduction_factor`` of the trials at each rung of steps
    (Optuna's ``SuccessiveHalvingPruner``, asynchronous successive halving)."""

    kind: Literal["successive_halving"] = Field(..., description="Successive halving.")
    min_resource: int | Literal["auto"] = Field(
        "auto",
        description="Steps (per member) before the first rung; auto: a hundredth of the "
        "first finished trial's steps.",
    )
    reduction_factor: int = Field(
        4, ge=2, description="Rung r sits at min_resource * reduction_factor**r steps."
    )
    min_early_stopping_rate: int = Field(
        0, ge=0, description="Rungs skipped before the first comparison."
    )
    bootstrap_count: int = Field(
        0, ge=0, description="Trials a rung needs before it prunes anyone."
    )

    @field_validator("min_resource", mode="before")
    @classmethod
    def _steps_or_auto(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"must be a step count >= 1 or auto (got {value!r})")
        return value


PrunerSettings = NoPruner | MedianPrunerSettings | SuccessiveHalvingSettings
PRUNERS: dict[str, type[StrictModel]] = {
    "none": NoPruner,
    "median": MedianPrunerSettings,
    "successive_halving": SuccessiveHalvingSettings,
}
"""``kind`` -> its settings."""


def parse_pruner(raw: Mapping[str, Any] | str | None) -> PrunerSettings:
    """Validate ``hydra.sweeper.pruner``; unset (``null``) settings take their defaults.

    Args:
        raw: The settings (``{kind: median, n_warmup_steps: 5000}``), a bare kind
            (``median``), or ``None`` for no pruning.

    Raises:
        ConfigError: Naming the setting and what is wrong.
    """
    if raw is None:
        return NoPruner()
    data = {"kind": raw} if isinstance(raw, str) else dict(raw.items())
    data = {str(k): v for k, v in data.items() if v is not None}
    kind = data.setdefault("kind", "none")
    model = PRUNERS.get(str(kind))
    if model is None:
        guess = did_you_mean(str(kind), list(PRUNERS))
        hint = f" (did you mean {guess}?)" if guess else ""
        raise ConfigError(
            f"{PRUNER_PATH}.kind: {kind!r} is not a pruner{hint}; use one of {', '.join(PRUNERS)}"
        )
    try:
        return model.model_validate(data)  # type: ignore[return-value]
    except ValidationError as exc:
        problems = problems_from_validation(exc, model)
        for problem in problems:
            message = problem.message
            if message.startswith("unknown field") and "did you mean" not in message:
                message += f" (a {kind} pruner takes {_settings_of(model)})"
            object.__setattr__(problem, "path", f"{PRUNER_PATH}.{problem.path}")
            object.__setattr__(problem, "message", message)
        raise ConfigError(problems) from None


def _settings_of(model: type[StrictModel]) -> str:
    names = [n for n in model.model_fields if n != "kind"]
    return ", ".join(names) if names else "no settings"


def make_pruner(settings: Any) -> Any:
    """The Optuna pruner of validated settings (imports optuna)."""
    import optuna

    if isinstance(settings, MedianPrunerSettings):
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings.n_startup_trials,
            n_warmup_steps=settings.n_warmup_steps,
            interval_steps=settings.interval_steps,
            n_min_trials=settings.n_min_trials,
        )
    if isinstance(settings, SuccessiveHalvingSettings):
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=settings.min_resource,
            reduction_factor=settings.reduction_factor,
            min_early_stopping_rate=settings.min_early_stopping_rate,
            bootstrap_count=settings.bootstrap_count,
        )
    return optuna.pruners.NopPruner()


def describe_pruner(settings: Any) -> str:
    """``median (n_startup_trials=5, n_warmup_steps=0, ...)`` or ``none``."""
    values = settings.model_dump(exclude={"kind"})
    inner = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"{settings.kind} ({inner})" if inner else settings.kind
