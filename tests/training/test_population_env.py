"""The population's vector env: one per population, or one per member that can sit a step out."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from agilerl.arena.models.env import GymEnvSpec
from agilerl.envs.gym import make_vector_env
from agilerl.training.batched_eval import evaluate_population
from agilerl.training.population_env import PopulationVectorEnv


class CountingFactory:
    """Makes CartPole vector envs and counts the sub-env steps they take."""

    def __init__(self) -> None:
        self.spec = GymEnvSpec(name="CartPole-v1", num_envs=1)
        self.sub_env_steps = 0

    def __call__(self, seed: int | None = None, num_envs: int = 1) -> gym.vector.VectorEnv:
        env = make_vector_env(self.spec, num_envs, seed=seed)
        step, factory = env.step, self

        def counted(actions: np.ndarray) -> tuple:
            factory.sub_env_steps += len(actions)
            return step(actions)

        env.step = counted
        return env


class FixedGroup:
    """A 'group' acting by rule: member 0 always pushes left (falls fast), others alternate."""

    def __init__(self, members: int) -> None:
        self.slots = list(range(members))
        self.t = 0

    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        self.t += 1
        n = obs.shape[1]
        return [np.zeros(n, dtype=np.int64)] + [
            np.full(n, self.t % 2, dtype=np.int64) for _ in self.slots[1:]
        ]


class Member:
    def __init__(self) -> None:
        self.fitness: list[float] = []


def _evaluate(per_member: bool) -> tuple[list[float], int]:
    factory = CountingFactory()
    env = PopulationVectorEnv(factory, 3, 2, per_member=per_member)
    try:
        fitness, _stats = evaluate_population(
            [FixedGroup(3)], [Member() for _ in range(3)], env, seed=11, loop=2, max_steps=None
        )
    finally:
        env.close()
    return fitness, factory.sub_env_steps


def test_per_member_envs_stop_stepping_a_member_that_has_played_its_episodes() -> None:
    shared_fitness, shared_steps = _evaluate(per_member=False)
    own_fitness, own_steps = _evaluate(per_member=True)
    assert own_fitness == shared_fitness
    # Member 0 falls in ~10 steps while the others balance longer: only its envs stop early.
    assert shared_fitness[0] < min(shared_fitness[1:])
    assert own_steps < shared_steps


def test_per_member_reset_seeds_each_member_like_its_own_vector_env() -> None:
    factory = CountingFactory()
    env = PopulationVectorEnv(factory, 2, 3, per_member=True)
    lone = factory(seed=None, num_envs=3)
    try:
        obs = env.reset([5, 9])
        assert obs.shape == (2, 3, 4)
        np.testing.assert_array_equal(obs[1], lone.reset(seed=9)[0])
        before = obs.copy()
        next_obs, real, reward, terminated, truncated = env.step(
            [np.zeros(3, dtype=np.int64), np.ones(3, dtype=np.int64)], members=[1]
        )
        np.testing.assert_array_equal(next_obs[0], before[0])  # member 0 sat the step out
        np.testing.assert_array_equal(reward[0], 0.0)
        assert not terminated[0].any() and not truncated[0].any()
        np.testing.assert_array_equal(next_obs[1], lone.step(np.ones(3, dtype=np.int64))[0])
        np.testing.assert_array_equal(real[1], next_obs[1])
    finally:
        env.close()
        lone.close()
