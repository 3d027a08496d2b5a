"""The README's ``python train.py algorithm=matd3 env=mpe_simple_speaker_listener``, resumed.

A run of the README command (smaller budget) stopped half way and continued with
``resume=<run dir>`` ends with the metrics and weights of the same run done in one go.
Slow: three ``train.py`` processes of 2k-4k env steps.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
COMMAND = "algorithm=matd3 env=mpe_simple_speaker_listener"
BUDGET = (
    "training.evo_steps=1000",
    "training.learning_delay=256",
    "replay_buffer.store_in_checkpoint=true",
    "logger.tensorboard=false",
)

pytestmark = pytest.mark.slow


def _train(cwd: Path, *overrides: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def _fitness(run: Path) -> list[tuple[str, str, str]]:
    rows = csv.DictReader((run / "metrics.csv").open())
    return [(r["step"], r["agent"], r["fitness"]) for r in rows]


def _weights(run: Path) -> dict:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return torch.load(latest / "agent_0.pt", weights_only=True)["networks"]


def test_readme_matd3_command_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    _train(tmp_path, *COMMAND.split(), *BUDGET, "training.max_steps=4000", f"run_dir={whole}")
    _train(tmp_path, *COMMAND.split(), *BUDGET, "training.max_steps=2000", f"run_dir={parts}")
    assert json.loads((parts / "summary.json").read_text())["total_steps"] == 2000
    _train(tmp_path, f"resume={parts}", "training.max_steps=4000")
    summary = json.loads((parts / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] == 4000
    assert _fitness(parts) == _fitness(whole) and len(_fitness(whole)) == 4
    a, b = _weights(whole), _weights(parts)
    for name, net in a.items():
        for key, tensor in net.items():
            assert torch.equal(tensor, b[name][key]), (name, key)
