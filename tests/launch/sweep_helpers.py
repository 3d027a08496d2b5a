"""Helpers for sweep tests: run train.py -m in a subprocess, read the ledger."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agilerl.launch.ledger import JobRecord, Ledger

REPO = Path(__file__).resolve().parents[2]
QUICK = [
    "training=smoke",
    "training.max_steps=1024",
    "training.evo_steps=512",
    "training.eval_loop=1",
    "training.eval_steps=100",
    "training.checkpoint_steps=512",
    "algorithm.learn_step=256",
    "logger.tensorboard=false",
]


def multirun(sweep_dir: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO / "train.py"), "-m", f"hydra.sweep.dir={sweep_dir}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def jobs(sweep_dir: Path) -> dict[str, JobRecord]:
    return {j.key: j for j in Ledger(sweep_dir).jobs()}
