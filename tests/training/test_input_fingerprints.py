"""A resume refuses input files that changed since the run started (issue: resume did not
notice a base model or dataset replaced at the same path)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.envs.offline import Episode, write_mdp_file
from agilerl.trainer import LocalTrainer

TINY_NET = {"latent_dim": 16, "encoder_config": {"arch": "mlp", "hidden_size": [16]}}


def _dataset(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    episode = Episode(
        rng.uniform(-0.05, 0.05, (101, 4)).astype(np.float32),
        rng.integers(0, 2, 100),
        np.ones(100, np.float32),
        True,
    )
    return write_mdp_file(path, [episode], env_id="CartPole-v1")


def _trainer(data: Path, run: Path, max_steps: int, **options: object) -> LocalTrainer:
    return LocalTrainer(
        {"name": "CQN", "batch_size": 16},
        {"env_type": "offline", "name": "CartPole-v1", "dataset_path": str(data)},
        {"max_steps": max_steps, "evo_steps": 50, "eval_loop": 1, "eval_steps": 20},
        network=TINY_NET,
        run_dir=run,
        verbose=False,
        **options,
    )


def test_a_changed_dataset_is_refused_on_resume_unless_accepted(tmp_path: Path) -> None:
    data, run = _dataset(tmp_path / "data.npz", seed=0), tmp_path / "run"
    _trainer(data, run, 100).train()
    recorded = json.loads((run / "inputs.json").read_text())
    assert set(recorded) == {"environment.dataset_path"}
    summary = (run / "summary.json").read_text()
    _dataset(data, seed=1)  # another dataset at the same path
    with pytest.raises(ConfigError, match=r"environment.dataset_path .*data.npz changed"):
        _trainer(data, run, 200, resume=True).train()
    assert (run / "summary.json").read_text() == summary  # nothing was written
    population, _ = _trainer(data, run, 200, resume=True, accept_changed_inputs=True).train()
    assert population[0].steps == 200
    now = json.loads((run / "inputs.json").read_text())
    assert now["environment.dataset_path"]["sha256"] != recorded[
        "environment.dataset_path"]["sha256"]  # fmt: skip
    _trainer(data, run, 300, resume=True).train()  # the accepted files are the run's now
