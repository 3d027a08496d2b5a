"""Off-policy training through the real loop: tuned presets, memory in checkpoints, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agilerl.arena.models import ConfigError
from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer


def _trainer(compose, tmp_path: Path, *overrides: str, seed: int = 0) -> LocalTrainer:
    manifest, _ = build_manifest(compose(*overrides))
    return LocalTrainer.from_manifest(manifest, seed=seed, run_dir=tmp_path / f"run{seed}",
                                      verbose=False, logger={"tensorboard": False})  # fmt: skip


def _summary(tmp_path: Path, seed: int = 0) -> dict:
    return json.loads((tmp_path / f"run{seed}" / "summary.json").read_text())


@pytest.mark.slow  # a learning run; TD3's direct Pendulum test stays in the default suite
def test_td3_pendulum_preset_reaches_minus_200_within_20k(compose, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    _trainer(compose, tmp_path, "algorithm=td3", "env=pendulum").train()
    summary = _summary(tmp_path)
    assert summary["status"] == "target_reached" and summary["solved_at_step"] <= 20_000, summary


@pytest.mark.slow
def test_ddpg_pendulum_preset_reaches_minus_200_within_20k(compose, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    _trainer(compose, tmp_path, "algorithm=ddpg", "env=pendulum").train()
    assert _summary(tmp_path)["status"] == "target_reached", _summary(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["dqn", "rainbow_dqn"])
def test_cartpole_presets_solve_in_two_of_three_seeds(
    compose, tmp_path: Path, algorithm: str
) -> None:
    torch.set_num_threads(1)
    solved = 0
    for seed in (0, 1, 2):
        _trainer(compose, tmp_path, f"algorithm={algorithm}", "env=cartpole", seed=seed).train()
        summary = _summary(tmp_path, seed)
        solved += summary["status"] == "target_reached" and summary["solved_at_step"] <= 100_000
        if solved == 2:
            break
    assert solved >= 2


def test_replay_memory_is_checkpointed_and_restored(compose, tmp_path: Path) -> None:
    args = ("algorithm=dqn", "env=cartpole", "training.max_steps=1500", "training.evo_steps=500",
            "training.target_score=null", "training.eval_loop=1", "training.checkpoint_steps=500",
            "training.learning_delay=100", "replay_buffer.store_in_checkpoint=true")  # fmt: skip
    _trainer(compose, tmp_path, *args).train()
    run = tmp_path / "run0"
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    memory = torch.load(latest / "memory.pt", weights_only=True)["memories"][0]["main"]
    assert memory["counter"] == 1500 and memory["fields"]["reward"].shape[0] == 1500
    manifest, _ = build_manifest(compose(*args[:2], "training.max_steps=2000", *args[3:]))
    resumed = LocalTrainer.from_manifest(manifest, run_dir=run, resume=True, verbose=False)
    resumed.manifest.training.max_steps = 2000
    resumed.train()
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    sizes = [int(float(dict(zip(header, r.split(","), strict=True))["memory_size"]))
             for r in rows[1:]]  # fmt: skip
    assert sizes == [500, 1000, 1500, 2000]


def test_experience_sharing_off_gives_each_agent_its_memory(compose, tmp_path: Path) -> None:
    trainer = _trainer(compose, tmp_path, "algorithm=dqn", "env=cartpole",
                       "training.experience_sharing=false", "training.pop_size=2")  # fmt: skip
    from agilerl.strategies.single_agent import make_memories

    envs = trainer.strategy.make_envs(trainer.manifest, seed=0)
    memory, n_step = make_memories(trainer.spec, trainer.manifest, envs, device="cpu")
    envs.close()
    assert isinstance(memory, list) and len(memory) == 2 and memory[0] is not memory[1]
    assert n_step is None


def test_a_buffer_larger_than_memory_is_refused_with_the_number(compose, tmp_path: Path) -> None:
    trainer = _trainer(compose, tmp_path, "algorithm=dqn", "env=cartpole",
                       "replay_buffer.max_size=100000000000")  # fmt: skip
    with pytest.raises(ConfigError, match=r"replay_buffer\.max_size: .*bytes"):
        trainer.train()
