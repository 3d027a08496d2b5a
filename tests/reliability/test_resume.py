"""Cases 8, 9, 11, 13, 14: resume changes nothing before it is sure; checkpoints survive."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.trainer import LocalTrainer
from agilerl.training.checkpointing import CheckpointManager, ResumeState
from tests.reliability.helpers import TINY_PPO, no_traceback, train, write_manifest

ENV = {"name": "CartPole-v1", "num_envs": 1}
TINY = {"max_steps": 64, "evo_steps": 64, "eval_steps": 10}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("resume")
    manifest = write_manifest(folder / "m.yaml", training={**TINY})
    result = train(f"manifest={manifest}", f"run_dir={folder / 'run'}", "logger.tensorboard=false")
    assert result.returncode == 0, result.stderr
    return folder / "run"


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file's bytes, except the lock (it holds the pid of whoever held it last)."""
    return {str(p): p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}


def test_case_08_a_refused_resume_writes_nothing(finished_run: Path) -> None:
    before = _snapshot(finished_run)
    refused = train(f"resume={finished_run}", "training.pop_size=2")
    assert refused.returncode == 2 and no_traceback(refused)
    assert "training.pop_size" in refused.stderr
    assert _snapshot(finished_run) == before


def test_case_11_overrides_that_cannot_apply_are_refused(
    finished_run: Path, tmp_path: Path
) -> None:
    before = _snapshot(finished_run)
    lr = train(f"resume={finished_run}", "algorithm.lr=0.5")
    assert lr.returncode == 2 and "algorithm.lr: cannot change when resuming" in lr.stderr
    assert "training.max_steps, training.max_wall_seconds" in lr.stderr
    env = train(f"resume={finished_run}", "env=pendulum")
    assert env.returncode == 2 and "env=pendulum cannot apply" in env.stderr
    manifest = write_manifest(tmp_path / "m.yaml")
    hpo = train(f"manifest={manifest}", "hpo=evolutionary", "dry_run=true")
    assert hpo.returncode == 2 and "hpo=evolutionary cannot apply" in hpo.stderr
    assert _snapshot(finished_run) == before


def test_case_14_resume_keeps_the_runs_seed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    LocalTrainer(TINY_PPO, ENV, TINY, seed=3, run_dir=run_dir, verbose=False).train()
    longer = {**TINY, "max_steps": 128}
    with pytest.raises(ConfigError, match="started with seed 3"):
        LocalTrainer(TINY_PPO, ENV, longer, seed=5, run_dir=run_dir, resume=True).train()
    LocalTrainer(TINY_PPO, ENV, longer, run_dir=run_dir, resume=True, verbose=False).train()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["seed"] == 3 and summary["total_steps"] == 128


def test_case_09_a_resave_never_removes_the_newest_before_its_successor(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "checkpoints")
    first = manager.save(100, [{"w": torch.ones(2)}], ResumeState(total_steps=100))
    with pytest.raises(Exception):  # noqa: B017 - a crash while writing the re-save
        manager.save(100, [{"w": lambda: None}], ResumeState(total_steps=100))
    agents, _state, path = manager.load_latest()
    assert path == first and torch.equal(agents[0]["w"], torch.ones(2))
    second = manager.save(100, [{"w": torch.zeros(2)}], ResumeState(total_steps=100))
    assert second != first and not first.exists() and manager.latest_dir() == second
    assert torch.equal(manager.load_latest()[0][0]["w"], torch.zeros(2))


def test_case_09_a_corrupt_newest_checkpoint_falls_back_with_a_warning(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(100, [{"w": torch.ones(2)}], ResumeState(total_steps=100))
    newest = manager.save(200, [{"w": torch.zeros(2)}], ResumeState(total_steps=200))
    agent = newest / "agent_0.pt"
    agent.write_bytes(agent.read_bytes()[:50])
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint step_000000000100"):
        _agents, state, path = manager.load_latest()
    assert state.total_steps == 100 and path.name == "step_000000000100"


def test_case_13_periodic_checkpoints_and_no_duplicate_metrics(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m.yaml", training={**TINY, "max_steps": 192})
    run_dir = tmp_path / "run"
    args = (f"manifest={manifest}", f"run_dir={run_dir}", "logger.tensorboard=false")
    assert train(*args).returncode == 0
    steps = [p.name for p in CheckpointManager(run_dir / "checkpoints").complete_dirs()]
    assert steps == ["step_000000000064", "step_000000000128", "step_000000000192"]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    # A run killed before its first checkpoint: metrics written, no checkpoint yet.
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "summary.json").unlink()
    again = train(*args)
    assert again.returncode == 0, again.stderr
    rerun_rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [r["step"] for r in rerun_rows] == [r["step"] for r in rows] == ["64", "128", "192"]
