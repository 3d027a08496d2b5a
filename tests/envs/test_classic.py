"""PettingZoo classic games as single-agent envs against a random or frozen opponent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.envs.gym import make_vector_env

GAMES = ["agilerl/ConnectFour-v3", "agilerl/TicTacToe-v3"]


def _random_episodes(env: gym.Env, episodes: int, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    returns, total = [], 0.0
    while len(returns) < episodes:
        obs, reward, terminated, truncated, _ = env.step(
            rng.choice(np.flatnonzero(obs["action_mask"]))
        )
        total += reward
        if terminated or truncated:
            returns.append(total)
            total = 0.0
            obs, _ = env.reset()
    return returns


@pytest.mark.parametrize("name", GAMES)
def test_a_game_against_the_random_opponent(name: str) -> None:
    env = gym.make(name)
    assert set(env.observation_space.spaces) == {"observation", "action_mask"}
    returns = _random_episodes(env, 60)
    assert set(returns) <= {-1.0, 0.0, 1.0} and -1.0 in returns and 1.0 in returns
    again = _random_episodes(gym.make(name), 60)
    assert returns == again  # the opponent draws from the env's seeded RNG


@pytest.mark.parametrize("seat", ["first", "second"])
def test_the_learner_takes_its_seat(seat: str) -> None:
    env = gym.make("agilerl/TicTacToe-v3", learner_seat=seat)
    obs, info = env.reset(seed=0)
    assert info["seat"] == seat
    empty = 9 if seat == "first" else 8  # as second player the opponent has moved
    assert int(obs["action_mask"].sum()) == empty


def test_an_illegal_move_is_refused() -> None:
    env = gym.make("agilerl/TicTacToe-v3", learner_seat="second")
    obs, _ = env.reset(seed=0)
    taken = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    with pytest.raises(ValueError, match=f"illegal move {taken}"):
        env.step(taken)


def test_settings_are_named_in_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"env_config\.oponent: unknown setting.*opponent"):
        gym.make("agilerl/ConnectFour-v3", oponent="random")
    with pytest.raises(ConfigError, match=r"env_config\.learner_seat"):
        gym.make("agilerl/ConnectFour-v3", learner_seat="last")
    with pytest.raises(ConfigError, match=r"env_config\.opponent: .*no such file"):
        gym.make("agilerl/ConnectFour-v3", opponent=str(tmp_path / "missing"))


def test_a_frozen_agent_plays_the_other_seat(tmp_path) -> None:
    from agilerl.algorithms import DQN
    from agilerl.arena.models.algorithms.dqn import DQNSpec

    torch.manual_seed(0)
    probe = gym.make("agilerl/TicTacToe-v3")
    frozen = DQN(DQNSpec(), probe.observation_space, probe.action_space)
    frozen.save_checkpoint(tmp_path / "agent_0.pt")
    env = gym.make("agilerl/TicTacToe-v3", opponent=str(tmp_path / "agent_0.pt"))
    returns = _random_episodes(env, 20)
    assert set(returns) <= {-1.0, 0.0, 1.0}
    greedy = _random_episodes(gym.make("agilerl/TicTacToe-v3", opponent=str(tmp_path)), 1)
    assert len(greedy) == 1  # a directory holding agent_<i>.pt names it too


def test_vector_env_from_a_manifest_section() -> None:
    spec = GymEnvSpec(name="agilerl/ConnectFour-v3", num_envs=2, config={"opponent": "random"})
    env = make_vector_env(spec, seed=0)
    obs, _ = env.reset(seed=0)
    assert obs["observation"].shape == (2, 84) and obs["action_mask"].shape == (2, 7)
