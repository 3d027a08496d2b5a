"""What a training loop returns: a typed result, not a shared dict."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("completed", "target_reached", "time_limit", "interrupted", "failed", "pruned")


@dataclass
class LoopResult:
    """The outcome of a training loop.

    Unpacks as ``population, fitnesses = loop(...)``, the loops' older return.

    Attributes:
        population: The agents at the end of the run.
        fitnesses: Each agent's last evaluation (NaN if it was never evaluated).
        total_steps: Env steps the whole population took.
        best_fitness: Best evaluation seen in the run (``None`` if none was finite).
        final_fitness: Best of the agents' last evaluations.
        final_fitness_std: Std of the episode returns behind ``final_fitness``.
        eval_episodes: Episodes behind ``final_fitness``.
        solved_at_step: Total steps when ``target_score`` was first reached.
        status: One of :data:`STATUSES`.
        wall_seconds: Wall time of the run, including time before a resume.
    """

    population: list[Any] = field(repr=False)
    fitnesses: list[float]
    total_steps: int = 0
    best_fitness: float | None = None
    final_fitness: float | None = None
    final_fitness_std: float | None = None
    eval_episodes: int | None = None
    solved_at_step: int | None = None
    status: str = "completed"
    wall_seconds: float | None = None

    def __iter__(self) -> Iterator[Any]:
        yield self.population
        yield self.fitnesses


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """The mean of each key over ``rows`` (dicts with the same keys); ``{}`` for none."""
    if not rows:
        return {}
    return {key: sum(float(row[key]) for row in rows) / len(rows) for key in rows[0]}
