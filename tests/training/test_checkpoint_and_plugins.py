"""One checkpoint writer, typed resume state and results, and a paradigm as a plug-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.strategies import EnvSetup, TrainingStrategy
from agilerl.trainer import LocalTrainer
from agilerl.training.checkpointing import (
    CheckpointManager,
    ResumeState,
    read_agent_file,
    write_agent_file,
)
from agilerl.training.results import LoopResult


def test_agent_files_carry_a_checksum_that_catches_silent_corruption(tmp_path: Path) -> None:
    path = tmp_path / "agent_0.pt"
    state = {"format": "x", "weights": torch.arange(6.0), "steps": 3}
    write_agent_file(state, path)
    assert "checksum" in torch.load(path, weights_only=True)
    loaded = read_agent_file(path)
    assert torch.equal(loaded["weights"], state["weights"]) and "checksum" not in loaded
    damaged = torch.load(path, weights_only=True)
    damaged["weights"][0] = 99.0  # same size and type: only the checksum can tell
    torch.save(damaged, path)
    with pytest.raises(ConfigError, match=f"{path}.*checksum"):
        read_agent_file(path)


def test_resume_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    state = ResumeState(generation=2, total_steps=512, wall_seconds=1.5, epsilons=[0.5, 0.25])
    memories = [{"counter": torch.tensor(7)}]
    manager.save(512, [{"format": "x", "steps": 1}], state, memories=memories)
    agents, loaded, path = manager.load_latest()
    assert path.name == "step_000000000512" and agents == [{"format": "x", "steps": 1}]
    assert isinstance(loaded, ResumeState) and loaded.rng is not None
    assert (loaded.generation, loaded.total_steps, loaded.epsilons) == (2, 512, [0.5, 0.25])
    assert int(loaded.memory[0]["counter"]) == 7


def test_run_returns_the_typed_result_summary_json_records(tmp_path: Path) -> None:
    trainer = LocalTrainer(
        {"name": "PPO", "learn_step": 128, "update_epochs": 1},
        {"name": "CartPole-v1", "num_envs": 2},
        {"max_steps": 256, "evo_steps": 128, "eval_loop": 1, "eval_steps": 50},
        run_dir=tmp_path / "run",
        verbose=False,
    )
    result = trainer.run()
    assert isinstance(result, LoopResult) and result.status == "completed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total_steps"] == result.total_steps >= 256
    assert summary["best_fitness"] == result.best_fitness
    population, fitnesses = result
    assert population is result.population and len(fitnesses) == 1


class _CountingEnv:
    """Not a gymnasium env: a paradigm's envs are whatever its loop takes."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _CountingStrategy(TrainingStrategy):
    """A paradigm the trainer has never heard of: its own envs, population and loop."""

    paradigm: ClassVar[str] = "counting"
    env = _CountingEnv()

    @staticmethod
    def _loop(population: list[Any], env: Any, **kwargs: Any) -> LoopResult:
        steps = kwargs["training"].max_steps
        for agent in population:
            agent["count"] += steps
        return LoopResult(population, [1.0] * len(population), total_steps=steps)

    default_loop = _loop

    def make_envs(self, manifest: Any, *, seed: int) -> EnvSetup:
        return EnvSetup(self.env, None, None, None)

    def build_population(self, spec: Any, builder: Any, envs: EnvSetup, runtime: Any) -> list:
        return [{"count": 0, "index": i} for i in range(runtime.pop_size)]

    def get_trainer_kwargs(self, spec: Any, **kwargs: Any) -> dict[str, Any]:
        return {"training": kwargs["training"], "label": spec.name}


def test_a_new_paradigm_plugs_in_without_a_trainer_branch(tmp_path: Path) -> None:
    trainer = LocalTrainer("PPO", "CartPole-v1", {"max_steps": 64, "evo_steps": 64,
                           "pop_size": 2}, run_dir=tmp_path / "run", verbose=False)  # fmt: skip
    trainer.strategy = _CountingStrategy()
    population, fitnesses = trainer.train()
    assert population == [{"count": 64, "index": 0}, {"count": 64, "index": 1}]
    assert fitnesses == [1.0, 1.0] and _CountingStrategy.env.closed
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["total_steps"] == 64


def test_a_paradigm_without_envs_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    class NoEnvs(_CountingStrategy):
        make_envs = TrainingStrategy.make_envs

    trainer = LocalTrainer("PPO", "CartPole-v1", run_dir=tmp_path / "run", verbose=False)
    trainer.strategy = NoEnvs()
    assert not trainer.strategy.trainable
    with pytest.raises(ConfigError, match="counting training is not available"):
        trainer.train()
    assert not (tmp_path / "run").exists()
