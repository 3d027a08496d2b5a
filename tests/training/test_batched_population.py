"""A batched population learns what its members learn one after another."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from agilerl.algorithms.dqn import DQN
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec
from agilerl.envs.gym import make_vector_env
from agilerl.models.training import init_buffer
from agilerl.training.population_loops import train_off_policy_population
from agilerl.training.run_context import RunContext
from tests.training.batched_helpers import (
    EVO_NETWORK,
    EVOLUTION,
    NET,
    assert_same_runs,
    rows,
    train_manifest,
)

HPS = [
    {"lr": 2e-3, "gamma": 0.99, "tau": 0.05, "batch_size": 16, "learn_step": 2},
    {"lr": 5e-4, "gamma": 0.95, "tau": 0.2, "batch_size": 16, "learn_step": 1},
    {"lr": 1e-3, "gamma": 0.98, "tau": 1.0, "batch_size": 8, "learn_step": 2},
]


def _run(batched: bool, num_envs: int = 2) -> list[DQN]:
    torch.manual_seed(0)
    env_spec = GymEnvSpec(name="CartPole-v1", num_envs=num_envs)

    def factory(seed: int | None = None, num_envs: int | None = None) -> object:
        return make_vector_env(env_spec, num_envs, seed=seed)

    env = factory(seed=0)
    probe = env.single_observation_space, env.single_action_space
    # Member 3's GELU head is no plain chain: it learns on its own beside the stacked group.
    gelu = {**NET, "head_config": {"hidden_size": [16], "activation": "GELU"}}
    population = [
        DQN(DQNSpec.model_validate({"net_config": net, **hp}), *probe, index=i)
        for i, (hp, net) in enumerate(zip([*HPS, HPS[0]], [NET, NET, NET, gelu], strict=True))
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
    result = train_off_policy_population(
        population,
        env,
        memory=memories,
        training=TrainingSpec(
            max_steps=300,
            evo_steps=150,
            eval_loop=2,
            eval_steps=100,
            learning_delay=50,
            eps_decay=0.995,
            batched_population=batched,
        ),
        env_factory=factory,
        run=RunContext.ephemeral(),
    )
    env.close()
    return result.population


def _assert_same(batched: list[DQN], sequential: list[DQN]) -> None:
    for b, s in zip(batched, sequential, strict=True):
        assert b.steps == s.steps and b.num_updates == s.num_updates > 50
        assert b.optimizer.step_count == s.optimizer.step_count
        assert b.scores == s.scores
        assert b.fitness == pytest.approx(s.fitness)
        for name in ("actor", "actor_target"):
            for x, y in zip(
                getattr(b, name).parameters(), getattr(s, name).parameters(), strict=True
            ):
                torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-5)


def test_batched_dqn_population_matches_sequential_members() -> None:
    from agilerl.algorithms.batched import DQNGroup, LoneGroup, make_groups

    torch.set_num_threads(1)
    batched, sequential = _run(True), _run(False)
    assert [type(g) for g in make_groups(batched)] == [DQNGroup, LoneGroup]
    _assert_same(batched, sequential)
    assert not math.isclose(batched[0].fitness[-1], 0.0)
    np.testing.assert_raises(
        AssertionError,
        torch.testing.assert_close,
        batched[0].actor.head.linears[-1].weight,
        batched[1].actor.head.linears[-1].weight,
    )


DQN_EVO = {
    "algorithm": {"name": "DQN", "lr": 2e-3, "batch_size": 32, "learn_step": 2, "tau": 0.05},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": EVO_NETWORK,
    "replay_buffer": {"max_size": 10_000, "store_in_checkpoint": True},
    "training": {
        "max_steps": 1800,
        "evo_steps": 600,
        "pop_size": 3,
        "hpo": True,
        "eval_loop": 2,
        "eval_steps": 200,
        "learning_delay": 200,
        "eps_decay": 0.995,
        "experience_sharing": False,
    },
    **EVOLUTION,
}


def _train(run_dir: Path, batched: bool, stop_after: int | None = None, resume: bool = False):
    return train_manifest(DQN_EVO, run_dir, batched, stop_after, resume)


@pytest.mark.slow
def test_batched_hpo_run_matches_sequential_and_resumes_across_modes(tmp_path: Path) -> None:
    """Evolution (clones, architecture and hyperparameter mutations) between batched
    generations gives the sequential run; a batched checkpoint resumes sequentially and back."""
    torch.set_num_threads(1)
    _train(tmp_path / "batched", True)
    _train(tmp_path / "sequential", False)
    lineage = rows(tmp_path / "sequential", "hpo.csv", ("mutation",))
    assert any(r[0] not in ("None", "") for r in lineage), "no mutation happened"
    assert_same_runs(tmp_path / "batched", tmp_path / "sequential")
    # Every generation starts from seeded resets and the buffer, its generator and the
    # learning credits are checkpointed: a run stopped twice equals the uninterrupted one.
    for run, modes in (("mixed", (True, False, True)), ("plain", (False, False, False))):
        _train(tmp_path / run, modes[0], stop_after=1)
        _train(tmp_path / run, modes[1], stop_after=2, resume=True)
        _train(tmp_path / run, modes[2], resume=True)
        assert_same_runs(tmp_path / run, tmp_path / "sequential")


def test_batched_population_with_a_shared_memory_fills_it_together() -> None:
    torch.set_num_threads(1)
    env_spec = GymEnvSpec(name="CartPole-v1", num_envs=2)

    def factory(seed: int | None = None, num_envs: int | None = None) -> object:
        return make_vector_env(env_spec, num_envs, seed=seed)

    env = factory(seed=0)
    probe = env.single_observation_space, env.single_action_space
    population = [
        DQN(DQNSpec.model_validate({"net_config": NET, **hp}), *probe, index=i)
        for i, hp in enumerate(HPS)
    ]
    memory = init_buffer(
        ReplayBufferSpec(max_size=5000), population[0].spec, "cpu", seed=1,
        observation_space=probe[0], action_space=probe[1],
    )  # fmt: skip
    result = train_off_policy_population(
        population, env, memory=memory, env_factory=factory,
        training=TrainingSpec(
            max_steps=400, evo_steps=400, eval_loop=1, eval_steps=100, learning_delay=100,
            batched_population=True,
        ),
    )  # fmt: skip
    env.close()
    assert len(memory) == 3 * 400
    assert all(agent.num_updates > 50 and agent.steps == 400 for agent in result.population)
    assert all(math.isfinite(f) for f in result.fitnesses)


def test_a_fallback_warns_only_when_batching_was_asked_for() -> None:
    import warnings

    from agilerl.training.batched_eval import use_batched

    with pytest.warns(UserWarning, match="one after another: no member can be stacked"):
        assert not use_batched("no member can be stacked", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not use_batched("no member can be stacked", "auto")
        assert use_batched(None, True)
