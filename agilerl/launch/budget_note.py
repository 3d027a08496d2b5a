"""A start-up note when a run's budget far exceeds what its preset needed in ``benchmarks/``.

``scripts/bench/learning_table.py`` records, per preset (``algorithm=ppo
env=cartpole``, ``experiment=grpo_digits``), how many steps the runs of seeds
0-4 took to reach the preset's target. A run of that preset, with that target,
whose ``training.max_steps`` is more than :data:`FAR_ABOVE` times that many says
so when it starts: it stops at the target, but a run that misses it spends the
whole budget, which can be hours.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from agilerl.arena.models.manifest import TrainingManifest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
FAR_ABOVE = 10.0
"""A budget this many times the benchmark's steps to target earns the note."""


@dataclass(frozen=True)
class StepsToTarget:
    """One learning-table row: how far its preset's runs went to reach the target.

    Attributes:
        table: The table's file (``benchmarks/single_agent.csv``).
        target: The target the runs aimed at.
        steps: IQM over the seeds that reached it, in the paradigm's step unit.
        reached: How many seeds reached it.
        seeds: How many seeds ran.
    """

    table: Path
    target: float
    steps: float
    reached: int
    seeds: int


def preset_of(choices: dict[str, str | None]) -> str | None:
    """The learning table's ``preset`` key for Hydra's group choices, if it has one."""
    experiment = choices.get("experiment")
    if experiment:
        return f"experiment={experiment}"
    algorithm, env = choices.get("algorithm"), choices.get("env")
    if algorithm and env:
        return f"algorithm={algorithm} env={env}"
    return None


def benchmark_for(preset: str, folder: Path = BENCHMARKS) -> StepsToTarget | None:
    """The learning-table row measured for ``preset``, if one reached its target."""
    for table in sorted(folder.glob("*.csv")) if folder.is_dir() else ():
        try:
            with table.open(newline="") as handle:
                rows = list(csv.DictReader(handle))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        for row in rows:
            if row.get("preset") != preset:
                continue
            try:
                found = StepsToTarget(
                    table,
                    float(row["target"]),
                    float(row["steps_to_target_iqm"]),
                    int(row["reached"]),
                    int(row["n"]),
                )
            except (KeyError, TypeError, ValueError):
                return None  # no target, or no run reached it
            return found if found.steps > 0 else None
    return None


def budget_note(
    manifest: TrainingManifest,
    choices: dict[str, str | None],
    unit: str,
    folder: Path = BENCHMARKS,
) -> str | None:
    """The note for a budget :data:`FAR_ABOVE` times what the preset needed, else ``None``.

    Args:
        manifest: The validated manifest about to run.
        choices: Hydra's group choices (``algorithm``, ``env``, ``experiment``).
        unit: The paradigm's plural step unit (``env steps``, ``rounds``).
        folder: Where the learning tables are (the repository's ``benchmarks/``).
    """
    preset = preset_of(choices)
    found = benchmark_for(preset, folder) if preset else None
    training = manifest.training
    target = training.target_score
    if found is None or target is None or not math.isclose(target, found.target):
        return None
    ratio = training.max_steps / found.steps
    if ratio <= FAR_ABOVE:
        return None
    return (
        f"note: training.max_steps={training.max_steps:,} is {ratio:.0f}x the {unit} this "
        f"preset needed to reach {target:g} in benchmarks/{found.table.name} (IQM "
        f"{found.steps:,.0f} over the {found.reached} of {found.seeds} seeds that reached "
        f"it); the run stops at the target, but one that misses it runs the whole budget: "
        f"lower training.max_steps to bound it"
    )
