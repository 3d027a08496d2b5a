"""Shared helpers of the batched-population tests: train a manifest, compare two runs."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.algorithms.batched_helpers import NET

__all__ = [
    "EVOLUTION",
    "EVO_NETWORK",
    "NET",
    "assert_same_runs",
    "final_states",
    "rows",
    "train_both_modes",
    "train_manifest",
]

EVO_NETWORK = {
    "latent_dim": 32,
    "encoder_config": {"arch": "mlp", "hidden_size": [32]},
    "head_config": {"hidden_size": [32]},
}
"""The network of the off-policy HPO manifests."""

EVOLUTION = {
    "mutation": {
        "probabilities": {
            "no_mut": 0.1,
            "arch_mut": 0.3,
            "new_layer": 0.5,
            "params_mut": 0.2,
            "act_mut": 0.0,
            "rl_hp_mut": 0.4,
        },
        "rand_seed": 5,
    },
    "tournament_selection": {"tournament_size": 2, "elitism": True},
}
"""The mutation and selection sections of the HPO manifests (every kind of mutation happens)."""


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


def final_states(run: Path) -> list[dict]:
    """The members' states in the run's latest checkpoint, in slot order."""
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return [torch.load(p, weights_only=True) for p in sorted(latest.glob("agent_*.pt"))]


def assert_same_runs(
    run: Path,
    expected: Path,
    loss: str = "loss",
    optimizers: tuple[str, ...] = ("optimizer",),
    abs_tol: float = 0.0,
    weight_tol: float = 2e-4,
) -> None:
    """The two runs' lineage, metrics and final checkpoints agree (within float rounding).

    Args:
        run: The run checked.
        expected: The run it must equal.
        loss: The metrics column of the members' loss.
        optimizers: The optimizers whose step counts are compared.
        abs_tol: The absolute tolerance on fitness and loss (the relative one is ``1e-3``).
        weight_tol: The absolute tolerance on the final weights (the relative one is ``1e-3``).
    """
    columns = ("generation", "index", "parent", "mutation", "detail")
    if (expected / "hpo.csv").exists():
        assert rows(run, "hpo.csv", columns) == rows(expected, "hpo.csv", columns)
    with (expected / "metrics.csv").open() as f:
        header = f.readline().strip().split(",")
    exact = ("step", "generation", "agent", *[c for c in header if c.startswith("hp_")])
    assert rows(run, "metrics.csv", exact) == rows(expected, "metrics.csv", exact)
    for column in ("fitness", loss):
        got = [float(r[0]) for r in rows(run, "metrics.csv", (column,))]
        want = [float(r[0]) for r in rows(expected, "metrics.csv", (column,))]
        assert got == pytest.approx(want, rel=1e-3, abs=abs_tol), column
    for a, b in zip(final_states(expected), final_states(run), strict=True):
        assert (a["index"], a["steps"], a["num_updates"]) == (
            b["index"],
            b["steps"],
            b["num_updates"],
        )
        assert a["spec"] == b["spec"]
        for name in optimizers:
            assert a["optimizers"][name]["state"]["step"] == b["optimizers"][name]["state"]["step"]
        # Float rounding only: a batched GEMM and the single one sum in different orders, and
        # thousands of Adam steps amplify that (measured up to 6.7e-5 after 5,400 DQN steps
        # and a resume in the other mode). One Adam step of lr 2e-3 moves weights ~1e-3.
        for name, net in a["networks"].items():
            for key, tensor in net.items():
                torch.testing.assert_close(
                    b["networks"][name][key], tensor, rtol=1e-3, atol=weight_tol
                )


def train_both_modes(
    manifest: dict[str, Any], run_dir: Path, group_class: type, monkeypatch: Any, members: int
) -> None:
    """Train ``manifest`` batched (``run_dir / "batched"``) and sequentially (``"sequential"``).

    A spy on ``group_class.learn`` checks that the batched run really stacked all
    ``members`` in one update and that the sequential run made no stacked update.
    """
    stacked_updates: list[int] = []
    learn = group_class.learn

    def counted(self: object, rows: list[int], *args: Any) -> list[dict]:
        stacked_updates.append(len(rows))
        return learn(self, rows, *args)

    monkeypatch.setattr(group_class, "learn", counted)
    train_manifest(manifest, run_dir / "batched", True)
    assert stacked_updates and max(stacked_updates) == members
    calls = len(stacked_updates)
    train_manifest(manifest, run_dir / "sequential", False)
    assert len(stacked_updates) == calls  # the sequential run learns member by member
