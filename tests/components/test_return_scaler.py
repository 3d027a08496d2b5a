"""PPO's ``normalize_rewards``: rewards divided by the running spread of the discounted return."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from agilerl.algorithms import PPO
from agilerl.algorithms.batched.ppo import ppo_group_key
from agilerl.algorithms.core.base import EvolvableAlgorithm
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.components.return_scaler import REWARD_CLIP, ReturnScaler
from agilerl.hpo.architecture import rebuild_agent
from agilerl.training.collect import collect_rollouts
from agilerl.training.collect_recurrent import collect_recurrent_rollouts

NET = {"latent_dim": 8, "encoder_config": {"arch": "mlp", "hidden_size": [8]}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)


def test_rewards_are_divided_by_the_hand_computed_spread_of_the_discounted_return() -> None:
    scaler = ReturnScaler()
    rewards = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    done = np.array([[False, False], [True, False], [False, False]])
    carried = np.array([0.0, 10.0])  # env 1 is mid-episode from an earlier rollout
    scaler.scale(rewards, done, carried, gamma=0.5)
    # env 0: R = 1, 0.5 * 1 + 3 = 3.5 (episode ends), 5; env 1: R = 7, 7.5, 9.75
    seen = np.array([1.0, 3.5, 5.0, 7.0, 7.5, 9.75])
    np.testing.assert_allclose(carried, [5.0, 9.75])
    assert scaler.stats.count.item() == 6
    np.testing.assert_allclose(scaler.stats.var.item(), seen.var(), rtol=1e-5)
    raw = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_allclose(rewards, raw / np.sqrt(seen.var() + 1e-8), rtol=1e-5)
    scaler.scale(rewards, done, carried, gamma=0.5)  # the next rollout adds to them
    assert scaler.stats.count.item() == 12


def test_scaled_rewards_keep_their_sign_and_are_clipped() -> None:
    scaler = ReturnScaler()
    rewards = np.zeros((400, 1), np.float32)
    rewards[7, 0] = -1.0  # with gamma 0 the returns are the rewards: their spread is ~1/20
    scaler.scale(rewards, np.zeros((400, 1), bool), np.zeros(1), gamma=0.0)
    assert rewards[7, 0] == -REWARD_CLIP and np.all(np.delete(rewards, 7) == 0.0)


def _vec_env(num_envs: int = 2) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def _ppo(**fields: object) -> PPO:
    torch.manual_seed(0)  # the same weights and action noise for every agent built here
    spec = PPOSpec(**{"num_envs": 2, "learn_step": 64, "batch_size": 32, "update_epochs": 1,
                      "net_config": NET, **fields})  # fmt: skip
    env = gym.make("CartPole-v1")
    return PPO(spec, env.observation_space, env.action_space)


def _rollout(agent: PPO, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    env = _vec_env()
    buffer = agent.create_rollout_buffer()
    collect = collect_recurrent_rollouts if agent.spec.recurrent else collect_rollouts
    _, finished, _ = collect(agent, env, buffer, env.reset(seed=seed)[0])
    env.close()
    return buffer.rewards[: buffer.pos].numpy().copy(), finished


@pytest.mark.parametrize("recurrent", [False, True], ids=["feed-forward", "recurrent"])
def test_ppo_scales_its_rollouts_and_reports_the_env_returns(recurrent: bool) -> None:
    lstm = {"net_config": {"encoder_config": {"arch": "lstm"}}} if recurrent else {}
    plain, finished_plain = _rollout(_ppo(recurrent=recurrent, **lstm))
    assert np.all(plain == 1.0)  # CartPole's reward, untouched without the setting
    agent = _ppo(normalize_rewards=True, recurrent=recurrent, **lstm)
    scaled, finished = _rollout(agent)
    assert finished == finished_plain  # same actions (same seeds), the env's own returns
    std = agent.return_scaler.std
    assert agent.return_scaler.stats.count.item() == plain.size and std > 1.0
    np.testing.assert_allclose(scaled, 1.0 / std, rtol=1e-6)
    if not recurrent:
        assert ppo_group_key(agent) is None and ppo_group_key(_ppo()) is not None


def test_the_statistics_are_checkpointed_cloned_and_kept_by_mutations(tmp_path: Path) -> None:
    agent = _ppo(normalize_rewards=True)
    _rollout(agent)
    stats = agent.return_scaler.state_dict()
    path = tmp_path / "ppo.pt"
    agent.save_checkpoint(path)
    assert "return_scaler" in torch.load(path, weights_only=True)["extra"]
    config = {**agent.net_config, "latent_dim": 16}
    for other in (EvolvableAlgorithm.load(path), agent.clone(), rebuild_agent(agent, config)):
        for key, value in other.return_scaler.state_dict().items():
            torch.testing.assert_close(value, stats[key])
    without = tmp_path / "plain.pt"
    _ppo().save_checkpoint(without)
    assert "return_scaler" not in torch.load(without, weights_only=True)["extra"]
