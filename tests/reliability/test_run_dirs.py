"""Cases 5, 7, 10 and issue 17.6: run directories are owned, named and never clobbered."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.trainer import LocalTrainer
from tests.reliability.helpers import REPO, TINY_PPO, no_traceback, train, write_manifest

ENV = {"name": "CartPole-v1", "num_envs": 1}
TINY = {"max_steps": 64, "evo_steps": 64, "eval_steps": 10}


def _tiny_run(run_dir: Path, **training: object) -> LocalTrainer:
    return LocalTrainer(TINY_PPO, ENV, {**TINY, **training}, run_dir=run_dir, verbose=False)


def test_case_05_latest_cannot_point_outside_its_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _tiny_run(a).train()
    _tiny_run(b).train()
    b_latest = (b / "checkpoints" / "latest").read_text().strip()
    (a / "checkpoints" / "latest").write_text(f"../../b/checkpoints/{b_latest}\n")
    with pytest.raises(ConfigError, match="not a checkpoint directory of this run"):
        LocalTrainer(
            TINY_PPO,
            ENV,
            {**TINY, "max_steps": 128, "overwrite_checkpoints": True},
            run_dir=a,
            resume=True,
            verbose=False,
        ).train()
    assert (b / "checkpoints" / b_latest / "agent_0.pt").is_file()


@pytest.mark.slow
def test_case_07_one_process_per_run_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "shared"
    # a budget no machine finishes while the second process starts; SIGTERM ends it below
    manifest = write_manifest(
        tmp_path / "m.yaml", training={"max_steps": 50_000_000, "evo_steps": 512}
    )
    first = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "train.py"),
            f"manifest={manifest}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / ".agilerl-run").exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.2)
        second = train(f"manifest={manifest}", f"hydra.run.dir={run_dir}")
        assert first.poll() is None, "the first run ended before the second one started"
        assert second.returncode == 2 and no_traceback(second)
        assert "in use by another process" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        _out, err = first.communicate(timeout=300)
    # the refused second process took nothing from the first: it stops cleanly and saves
    assert first.returncode == 128 + signal.SIGTERM, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["total_steps"] > 0


def test_case_07_default_run_names_do_not_collide() -> None:
    code = "from agilerl.launch.run_names import run_name; print(run_name('ppo', 'CartPole-v1'))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    names = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(names) == 4 and all(n.startswith("ppo_cartpole-v1_") for n in names)


def test_case_10_a_folder_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    files = {"manifest.yaml": "my notes\n", "summary.json": "{}\n", "metrics.csv": "a,b\n1,2\n"}
    for name, text in files.items():
        (mine / name).write_text(text)
    manifest = write_manifest(tmp_path / "m.yaml")
    refused = train(f"manifest={manifest}", f"run_dir={mine}")
    assert refused.returncode == 2 and no_traceback(refused)
    assert "not a run directory of agilerl" in refused.stderr
    assert {p.name: p.read_text() for p in mine.iterdir()} == files
    with pytest.raises(ConfigError, match="not a run directory"):
        _tiny_run(mine).train()
    dry = train(f"manifest={manifest}", "run_dir=/etc", "dry_run=true")
    assert dry.returncode == 2 and "run_dir=/etc" in dry.stderr


@pytest.mark.slow
def test_17_6_runs_are_named_after_the_manifest_and_leave_no_empty_dirs(tmp_path: Path) -> None:
    manifest = tmp_path / "dqn.yaml"
    manifest.write_text(
        "algorithm: {name: DQN, learn_step: 8, batch_size: 16}\n"
        "environment: {name: Acrobot-v1, num_envs: 1}\n"
        "training: {max_steps: 64, evo_steps: 64, eval_steps: 10}\n"
        "replay_buffer: {max_size: 1000}\n"
    )
    done = train(f"manifest={REPO / manifest}", "logger.tensorboard=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert "_dqn_acrobot-v1_" in run_dir.name and (run_dir / "summary.json").is_file()
    bad = train("algorithm.lr=-1", cwd=tmp_path)
    assert bad.returncode == 2
    elsewhere = tmp_path / "elsewhere"
    ok = train(
        f"manifest={manifest}", f"run_dir={elsewhere}", "logger.tensorboard=false", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert list((tmp_path / "runs").glob("*/*")) == [run_dir]  # nothing else was left behind
    assert (elsewhere / "summary.json").is_file()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert train("algorithm.lr=-1", cwd=fresh).returncode == 2
    resumed = train(f"resume={elsewhere}", "training.max_steps=128", cwd=fresh)
    assert resumed.returncode == 0, resumed.stderr
    assert list(fresh.iterdir()) == []  # no empty runs/<date>/<time>_... directories


def test_a_run_stopped_before_training_removes_only_a_directory_it_made(tmp_path: Path) -> None:
    """A start-up error after the run directory is claimed (a replay buffer too small for
    the offline dataset, found when the dataset is read) leaves nothing behind, unless the
    directory was there before: then it is left as it was, with the manifest written."""
    from agilerl.training.run_lock import MARKER_FILE, claim_run_dir, mark_run_dir

    made = tmp_path / "made"
    with pytest.raises(RuntimeError), claim_run_dir(made):
        mark_run_dir(made)
        (made / "manifest.yaml").write_text("algorithm: {}\n")
        raise RuntimeError("stopped while building the population")
    assert not made.exists()
    given = tmp_path / "given"
    given.mkdir()
    with pytest.raises(RuntimeError), claim_run_dir(given):
        mark_run_dir(given)
        raise RuntimeError("stopped")
    assert given.is_dir() and (given / MARKER_FILE).exists()
    trained = tmp_path / "trained"
    with claim_run_dir(trained):
        (trained / "metrics.csv").write_text("step\n")
    assert (trained / "metrics.csv").exists()
