"""A run whose budget is far above what its preset needed in ``benchmarks/`` says so at the
start (issue 33: README commands ran 1,000,000-step budgets for hours without a word)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agilerl.launch.budget_note import BENCHMARKS, benchmark_for, budget_note
from agilerl.launch.compose import build_manifest

REPO = Path(__file__).resolve().parents[2]
HEADER = "row,preset,target,reached,n,steps_to_target_iqm\n"
PPO = {"algorithm": "ppo", "env": "cartpole", "experiment": None}


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    (tmp_path / "single_agent.csv").write_text(
        HEADER
        + "ppo_cartpole,algorithm=ppo env=cartpole,475,5,5,20000\n"
        + "never,algorithm=ppo env=acrobot,-100,0,5,\n"
    )
    return tmp_path


def _manifest(compose, *overrides: str):
    manifest, _ = build_manifest(compose(*overrides))
    return manifest


def test_a_budget_far_above_the_benchmark_is_named(compose, tables: Path) -> None:
    manifest = _manifest(compose, "algorithm=ppo", "env=cartpole", "training.max_steps=1000000")
    note = budget_note(manifest, PPO, "env steps", tables)
    assert note is not None
    assert "training.max_steps=1,000,000 is 50x the env steps" in note
    assert "reach 475 in benchmarks/single_agent.csv (IQM 20,000 over the 5 of 5" in note


def test_no_note_within_ten_times_or_for_another_target_or_preset(compose, tables: Path) -> None:
    at_ten = _manifest(compose, "algorithm=ppo", "env=cartpole", "training.max_steps=200000")
    assert budget_note(at_ten, PPO, "env steps", tables) is None
    other_target = _manifest(
        compose,
        "algorithm=ppo",
        "env=cartpole",
        "training.max_steps=1000000",
        "training.target_score=490",
    )
    assert budget_note(other_target, PPO, "env steps", tables) is None
    acrobot = _manifest(compose, "algorithm=ppo", "env=acrobot", "training.max_steps=1000000")
    choices = {**PPO, "env": "acrobot"}
    assert budget_note(acrobot, choices, "env steps", tables) is None  # no seed reached it
    assert benchmark_for("algorithm=ppo env=acrobot", tables) is None
    assert budget_note(at_ten, {"algorithm": None, "env": None}, "env steps", tables) is None


def test_every_benchmarked_preset_keeps_its_budget_within_ten_times(compose) -> None:
    """The presets the README runs print no note at their own budgets."""
    checked = 0
    for table in BENCHMARKS.glob("*.csv"):
        for line in table.read_text().splitlines()[1:]:
            preset = line.split(",")[2]
            found = benchmark_for(preset)
            if found is None:
                continue
            groups = dict(part.split("=") for part in preset.split())
            manifest = _manifest(compose, *preset.split())
            choices = {"experiment": None, **groups}
            assert budget_note(manifest, choices, "steps") is None, preset
            checked += 1
    assert checked >= 8


def test_train_py_prints_the_note_when_the_run_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "algorithm=ppo",
            "env=cartpole",
            "training.max_steps=2000000",
            "training.max_wall_seconds=1",
            "logger.tensorboard=false",
            f"run_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "note: training.max_steps=2,000,000 is" in done.stderr
    assert "benchmarks/single_agent.csv" in done.stderr
