"""Shared helpers of the batched-population tests: train a manifest, compare two runs."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch


def train_manifest(
    manifest: dict[str, Any],
    run_dir: Path,
    batched: bool,
    stop_after: int | None = None,
    resume: bool = False,
) -> Any:
    """Train ``manifest`` (batched or not) in ``run_dir``; stop after generation ``stop_after``."""
    from agilerl.arena.models import TrainingManifest
    from agilerl.trainer import LocalTrainer
    from agilerl.training.population_loop import PopulationLoop

    data = {**manifest, "training": {**manifest["training"], "batched_population": batched}}
    trainer = LocalTrainer.from_manifest(
        TrainingManifest.from_dict(data),
        run_dir=run_dir,
        seed=3,
        resume=resume,
        verbose=False,
        logger={"tensorboard": False},
    )
    if stop_after is None:
        return trainer.train()
    original = PopulationLoop.end_generation

    def stop(self: PopulationLoop, fitness: list, details: list) -> None:
        original(self, fitness, details)
        if self.generation == stop_after:
            self.run.stop_requested = "test"

    PopulationLoop.end_generation = stop
    try:
        return trainer.train()
    finally:
        PopulationLoop.end_generation = original


def rows(run: Path, name: str, columns: tuple[str, ...]) -> list[tuple]:
    """The ``columns`` of every row of the run's CSV file ``name``."""
    return [tuple(r[c] for c in columns) for r in csv.DictReader((run / name).open())]


def _final_states(run: Path) -> list[dict]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return [torch.load(p, weights_only=True) for p in sorted(latest.glob("agent_*.pt"))]


def assert_same_runs(run: Path, expected: Path, loss: str = "loss") -> None:
    """The two runs' lineage, metrics and final checkpoints agree."""
    columns = ("generation", "index", "parent", "mutation", "detail")
    assert rows(run, "hpo.csv", columns) == rows(expected, "hpo.csv", columns)
    metrics = ("step", "generation", "agent", "hp_lr", "hp_batch_size", "hp_gamma")
    assert rows(run, "metrics.csv", metrics) == rows(expected, "metrics.csv", metrics)
    for column in ("fitness", loss):
        got = [float(r[0]) for r in rows(run, "metrics.csv", (column,))]
        want = [float(r[0]) for r in rows(expected, "metrics.csv", (column,))]
        assert got == pytest.approx(want, rel=1e-3), column
    for a, b in zip(_final_states(expected), _final_states(run), strict=True):
        assert (a["index"], a["steps"], a["num_updates"]) == (
            b["index"],
            b["steps"],
            b["num_updates"],
        )
        assert a["spec"] == b["spec"]
        assert (
            a["optimizers"]["optimizer"]["state"]["step"]
            == b["optimizers"]["optimizer"]["state"]["step"]
        )
        # Float rounding only: a batched GEMM and the single one sum in different orders, and
        # thousands of Adam steps amplify that (measured up to 6.7e-5 after 5,400 DQN steps
        # and a resume in the other mode). One Adam step of lr 2e-3 moves weights ~1e-3.
        for name, net in a["networks"].items():
            for key, tensor in net.items():
                torch.testing.assert_close(b["networks"][name][key], tensor, rtol=1e-3, atol=2e-4)
