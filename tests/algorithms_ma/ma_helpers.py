"""Multi-agent loops run as the trainer runs them: a run directory, checkpoints, a resume."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from agilerl.logging.run_dir import RunDirectory
from agilerl.training.checkpointing import CheckpointManager, set_rng_state
from agilerl.training.results import LoopResult
from agilerl.training.run_context import RunContext


def run_context(path: Path, seed: int, *, resume: bool = False, agents: list | None = None):
    """A run context writing ``path``; with ``resume`` its latest checkpoint is loaded
    into ``agents`` (weights, counters) and the RNG states, as the trainer does."""
    checkpoints = CheckpointManager(path / "checkpoints")
    context = RunContext(run_dir=RunDirectory(path), checkpoints=checkpoints, seed=seed)
    if resume:
        states, loop_state, _ = checkpoints.load_latest()
        for agent, state in zip(agents or [], states, strict=True):
            agent.load_state_dict(state)
        if loop_state.rng is not None:
            set_rng_state(loop_state.rng)
        context.resume_state = loop_state
    return context


def stop_at_call(calls: int) -> Any:
    """A ``PopulationLoop.interrupted`` that raises the stop flag at its ``calls``-th call
    (what SIGTERM does, at a point of the test's choosing). Patch it in with monkeypatch."""
    from agilerl.training.population_loop import PopulationLoop

    seen = [0]
    original = PopulationLoop.interrupted

    def interrupted(self: PopulationLoop) -> bool:
        seen[0] += 1
        if seen[0] >= calls and self.run.stop_requested is None:
            self.run.stop_requested = "SIGTERM"
        return original(self)

    return interrupted


def table(path: Path, name: str = "metrics.csv") -> list[dict[str, str]]:
    """The rows of a run directory's CSV file (``metrics.csv``, ``hpo.csv``)."""
    with (path / name).open() as handle:
        return list(csv.DictReader(handle))


def generations(path: Path) -> list[list[dict[str, str]]]:
    """``metrics.csv`` grouped by generation, members in population order."""
    rows = table(path)
    out: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        out.setdefault(row["generation"], []).append(row)
    return list(out.values())


def fitness(result: LoopResult) -> list[float]:
    """Each member's last fitness."""
    return list(result.fitnesses)


__all__ = ["fitness", "generations", "run_context", "stop_at_call", "table"]
