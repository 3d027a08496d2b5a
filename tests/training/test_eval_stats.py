"""Evaluation records the spread and count of the very episodes the fitness averages."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.arena.models import TrainingManifest
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.training.evaluation import ReturnRecorder, episode_stats


@pytest.mark.parametrize(("copies", "loop"), [(3, 2), (1, 4)])
def test_recorded_returns_are_the_ones_the_fitness_averages(copies: int, loop: int) -> None:
    torch.manual_seed(0)
    manifest = TrainingManifest.from_dict(
        {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "num_envs": 1}}
    )
    spec = manifest.algorithm_with_network()
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * copies)
    agent = select_builder(spec).build(
        spec,
        env.single_observation_space,
        env.single_action_space,
        runtime=AlgorithmBuildRuntime(index=0, device="cpu", total_steps=1000),
    )
    recorder = ReturnRecorder(env)
    fitness = agent.test(recorder, loop=loop, greedy=False, seed=3)
    returns = recorder.returns(loop)
    assert len(returns) == copies * loop
    assert np.mean(returns) == pytest.approx(fitness)
    stats = episode_stats(returns)
    assert stats["eval_episodes"] == copies * loop
    assert stats["eval_std"] == pytest.approx(np.std(returns, ddof=1))
    env.close()
