"""Multirun sweeps without SLURM: sequential and submitit-local launchers, ledger, Optuna."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_helpers import QUICK, REPO, jobs, multirun


@pytest.mark.slow  # ~10-16 s: the default suite stays near 5 min on a slow host
def test_local_launcher_seed_sweep_and_ledger(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = multirun(sweep, "hydra/launcher=local", "seed=0,1", *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    records = jobs(sweep)
    assert len(records) == 2
    for record in records.values():
        assert record.state == "completed" and record.best_fitness is not None
        summary = json.loads((Path(record.run_dir) / "summary.json").read_text())
        assert summary["total_steps"] >= 1024 and summary["seed"] in (0, 1)
    status = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "status", str(sweep)],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0 and status.stdout.count("completed") >= 2
    summary = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "summary", str(sweep)],
        capture_output=True,
        text=True,
    )
    assert summary.returncode == 0 and "best:" in summary.stdout
    assert (sweep / "sweep_summary.png").exists()


def test_invalid_override_refuses_the_whole_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "bad"
    done = multirun(sweep, "hydra/launcher=local", "algorithm.lr=0.001,-1", *QUICK)
    assert done.returncode == 2
    assert "job [" in done.stderr and "algorithm.lr=-1" in done.stderr
    assert "algorithm.lr: " in done.stderr and "no job was submitted" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (sweep / "ledger.jsonl").exists()


def test_dry_run_prints_the_plan(tmp_path: Path) -> None:
    done = multirun(
        tmp_path / "dry",
        "seed=0,1,2",
        "hpo=evolutionary",
        "dry_run=true",
        "training.max_steps=5000",
    )
    assert done.returncode == 0, done.stderr
    assert "3 jobs, 60,000 env steps at most" in done.stdout
    assert not (tmp_path / "dry" / "ledger.jsonl").exists()


def test_failed_job_is_recorded_and_rerun_resumes_only_unfinished(tmp_path: Path) -> None:
    sweep = tmp_path / "mixed"
    done = multirun(sweep, "environment.name=CartPole-v1,CartPol-v1", *QUICK)
    assert done.returncode != 0
    records = jobs(sweep)
    states = {
        key.split("environment.name=")[1].split(",")[0]: r.state for key, r in records.items()
    }
    assert states == {"CartPole-v1": "completed", "CartPol-v1": "failed"}
    failed = next(r for r in records.values() if r.state == "failed")
    assert "CartPol-v1" in failed.error
    status = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "status", str(sweep)],
        capture_output=True,
        text=True,
    )
    assert "failed" in status.stdout
    printed = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "sweep", "rerun", str(sweep), "--print-only"],
        capture_output=True,
        text=True,
    )
    assert "1 of 2 job(s) to run again" in printed.stdout
    assert str(REPO / "train.py") in printed.stdout


@pytest.mark.slow  # ~10-16 s: the default suite stays near 5 min on a slow host
def test_optuna_sweeper_maximises_returned_fitness(tmp_path: Path) -> None:
    sweep = tmp_path / "optuna"
    done = multirun(
        sweep,
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.n_jobs=3",
        "hydra/launcher=local",
        "hydra.sweeper.search_space={algorithm: {batch_size: {type: categorical,"
        " choices: [64, 128]}, lr: {type: float, low: 1e-4, high: 1e-2, log: true}}}",
        *QUICK,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import yaml

    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["n_completed"] == 3
    best = max(r.best_fitness for r in jobs(sweep).values())
    assert results["best_value"] == best


def test_a_sweep_into_a_folder_of_the_users_is_refused_and_changes_nothing(tmp_path) -> None:
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("mine")
    done = multirun(folder, "seed=0,1", "training=smoke")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is not a sweep of agilerl (it holds chapter1.tex)" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["chapter1.tex"]
