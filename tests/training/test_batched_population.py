"""A batched population learns what its members learn one after another."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agilerl.algorithms.dqn import DQN
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.training import ReplayBufferSpec
from agilerl.envs.gym import make_vector_env
from agilerl.models.training import init_buffer
from agilerl.training.run_context import RunContext
from agilerl.training.train_off_policy import train_off_policy

NET = {
    "latent_dim": 32,
    "encoder_config": {"arch": "mlp", "hidden_size": [32]},
    "head_config": {"hidden_size": [32]},
}
HPS = [
    {"lr": 2e-3, "gamma": 0.99, "tau": 0.05, "batch_size": 32, "learn_step": 2},
    {"lr": 5e-4, "gamma": 0.95, "tau": 0.2, "batch_size": 32, "learn_step": 1},
    {"lr": 1e-3, "gamma": 0.98, "tau": 1.0, "batch_size": 16, "learn_step": 2},
]


def _run(batched: bool, num_envs: int = 2) -> list[DQN]:
    torch.manual_seed(0)
    env_spec = GymEnvSpec(name="CartPole-v1", num_envs=num_envs)

    def factory(seed: int | None = None, num_envs: int | None = None) -> object:
        return make_vector_env(env_spec, num_envs, seed=seed)

    env = factory(seed=0)
    probe = env.single_observation_space, env.single_action_space
    population = [
        DQN(DQNSpec.model_validate({"net_config": NET, **hp}), *probe, index=i)
        for i, hp in enumerate(HPS)
    ]
    memories = [
        init_buffer(
            ReplayBufferSpec(max_size=5000),
            population[0].spec,
            "cpu",
            seed=500 + i,
            observation_space=probe[0],
            action_space=probe[1],
        )
        for i in range(len(population))
    ]
    result = train_off_policy(
        population,
        env,
        memory=memories,
        max_steps=800,
        evo_steps=400,
        eval_loop=2,
        eval_steps=200,
        learning_delay=100,
        eps_decay=0.995,
        env_factory=factory,
        run=RunContext.ephemeral(),
        batched_population=batched,
    )
    env.close()
    return result.population


def _assert_same(batched: list[DQN], sequential: list[DQN]) -> None:
    for b, s in zip(batched, sequential, strict=True):
        assert b.steps == s.steps and b.num_updates == s.num_updates > 100
        assert b.optimizer.step_count == s.optimizer.step_count
        assert b.scores == s.scores
        assert b.fitness == pytest.approx(s.fitness)
        for name in ("actor", "actor_target"):
            for x, y in zip(
                getattr(b, name).parameters(), getattr(s, name).parameters(), strict=True
            ):
                torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-5)


def test_batched_dqn_population_matches_sequential_members() -> None:
    torch.set_num_threads(1)
    batched, sequential = _run(True), _run(False)
    _assert_same(batched, sequential)
    assert not math.isclose(batched[0].fitness[-1], 0.0)
    np.testing.assert_raises(
        AssertionError,
        torch.testing.assert_close,
        batched[0].actor.head.linears[-1].weight,
        batched[1].actor.head.linears[-1].weight,
    )
