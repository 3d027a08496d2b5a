"""Shared pieces of the hostile-input tests: subprocess runs and tiny manifests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TINY_TRAINING = {
    "max_steps": 256,
    "evo_steps": 128,
    "eval_loop": 1,
    "eval_steps": 20,
}
TINY_PPO = {"name": "PPO", "learn_step": 64, "batch_size": 32, "update_epochs": 1}


def run(*args: str, cwd: Path = REPO, timeout: int = 180) -> subprocess.CompletedProcess:
    """``python <args>`` with the repository importable, captured."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env
    )


def train(*overrides: str, cwd: Path = REPO, timeout: int = 180) -> subprocess.CompletedProcess:
    """``python train.py <overrides>``."""
    return run(str(REPO / "train.py"), *overrides, cwd=cwd, timeout=timeout)


def write_manifest(path: Path, environment: dict[str, Any] | None = None, **sections: Any) -> Path:
    """A small PPO/CartPole manifest, with sections replaced or added."""
    data = {
        "algorithm": dict(TINY_PPO),
        "environment": environment or {"name": "CartPole-v1", "num_envs": 2},
        "training": dict(TINY_TRAINING),
        **sections,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def no_traceback(result: subprocess.CompletedProcess) -> bool:
    return "Traceback" not in result.stderr and "Traceback" not in result.stdout


def offline_dataset_override(folder: Path, steps: int = 3_000) -> str:
    """Record a CartPole MDP file into ``folder`` (our script: scripted policy, 50% random);
    the override that trains on it."""
    sys.path.insert(0, str(REPO / "scripts"))
    from make_offline_dataset import make_dataset

    make_dataset(steps=steps, epsilon=0.5, seed=1, out=folder / "replay.npz")
    return f"environment.dataset_path={folder / 'replay.npz'}"
