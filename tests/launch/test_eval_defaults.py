"""A run evaluates 10 episodes unless its manifest or preset chooses (issue 33: untuned
pairs and ``LocalTrainer`` evaluated one episode and declared "solved" on it)."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer


def test_untuned_cli_and_python_runs_evaluate_ten_episodes(compose, tmp_path: Path) -> None:
    composed, _ = build_manifest(compose("algorithm=ppo", "env=acrobot"))
    python = LocalTrainer("PPO", "Acrobot-v1", run_dir=tmp_path / "a", verbose=False)
    assert composed.training.eval_loop == python.manifest.training.eval_loop == 10


def test_a_chosen_eval_loop_is_kept(compose, tmp_path: Path) -> None:
    one = LocalTrainer("PPO", "CartPole-v1", {"eval_loop": 1}, run_dir=tmp_path, verbose=False)
    assert one.manifest.training.eval_loop == 1
    smoke, _ = build_manifest(compose("algorithm=ppo", "env=cartpole", "training=smoke"))
    assert smoke.training.eval_loop == 1  # training=smoke chooses 1 for speed
    chosen, _ = build_manifest(compose("algorithm=ppo", "env=acrobot", "training.eval_loop=3"))
    assert chosen.training.eval_loop == 3


def test_the_run_records_and_uses_ten_episodes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    LocalTrainer(
        {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 1},
        {"name": "CartPole-v1", "num_envs": 2},
        {"max_steps": 128, "evo_steps": 128, "eval_steps": 20},
        run_dir=run_dir,
        verbose=False,
    ).train()
    written = yaml.safe_load((run_dir / "manifest.yaml").read_text())
    assert written["training"]["eval_loop"] == 10
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(float(r["eval_episodes"])) for r in rows] == [10]
