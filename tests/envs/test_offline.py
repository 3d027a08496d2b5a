"""Offline datasets: Minari and MDP-file round trips, buffer fill, and the user errors."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.envs.offline import (
    check_dataset,
    load_mdp_file,
    load_minari,
    load_offline_dataset,
    write_mdp_file,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_offline_dataset import main, make_dataset, record, scripted_cartpole

CARTPOLE = gym.make("CartPole-v1")
OBS, ACT = CARTPOLE.observation_space, CARTPOLE.action_space


@pytest.fixture(scope="module")
def episodes():
    """2,000 scripted steps with 50% random actions; the last episode is cut (truncated)."""
    return record("CartPole-v1", scripted_cartpole, steps=2_000, epsilon=0.5, seed=3)


@pytest.fixture
def minari_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def _expected(episodes):
    return (
        sum(len(e) for e in episodes),
        sum(e.terminated for e in episodes),
        sum(not e.terminated for e in episodes),
    )


def _check_transitions(data, episodes) -> None:
    """Every transition equals the recorded step: obs, action, reward, next obs, flags."""
    obs = np.concatenate([e.observations[:-1] for e in episodes])
    next_obs = np.concatenate([e.observations[1:] for e in episodes])
    actions = np.concatenate([e.actions for e in episodes])
    rewards = np.concatenate([e.rewards for e in episodes])
    np.testing.assert_array_equal(data.obs, obs)
    np.testing.assert_array_equal(data.action, actions)
    np.testing.assert_array_equal(data.reward, rewards)
    live = ~data.terminated  # terminal transitions never bootstrap
    np.testing.assert_array_equal(data.next_obs[live], next_obs[live])
    ends = np.cumsum([len(e) for e in episodes]) - 1
    np.testing.assert_array_equal(np.flatnonzero(data.terminated | data.truncated), ends)


@pytest.mark.parametrize("suffix", [".h5", ".npz"])
def test_mdp_file_round_trip_keeps_counts_and_terminations_vs_truncations(tmp_path, suffix) -> None:
    # Every third episode marked cut short: truncated episodes besides the terminated ones.
    eps = record("CartPole-v1", None, steps=1_500, epsilon=1.0, seed=0)
    for e in eps[::3]:
        e.terminated = False
    path = write_mdp_file(tmp_path / f"d{suffix}", eps, env_id="CartPole-v1")
    data = load_mdp_file(path)
    n, terminated, truncated = _expected(eps)
    assert (len(data), int(data.terminated.sum()), int(data.truncated.sum())) == (
        n,
        terminated,
        truncated,
    )
    assert truncated >= 2 and terminated >= 2
    assert data.num_episodes == len(eps)
    assert data.env_id == "CartPole-v1"
    _check_transitions(data, eps)


def test_minari_round_trip_recovers_env_and_episode_ends(minari_path, episodes) -> None:
    make_dataset(steps=2_000, epsilon=0.5, seed=3, minari_id="cartpole/test-v0")
    import minari

    stored = minari.load_dataset("cartpole/test-v0")
    assert stored.recover_environment().spec.id == "CartPole-v1"
    assert stored.total_steps == 2_000
    data = load_minari("cartpole/test-v0")
    n, terminated, truncated = _expected(episodes)
    assert (len(data), int(data.terminated.sum()), int(data.truncated.sum())) == (
        n,
        terminated,
        truncated,
    )
    assert truncated == 1  # the cut-off last episode
    assert data.env_id == "CartPole-v1"
    assert data.action_space == ACT
    _check_transitions(data, episodes)


def test_dataset_fills_the_replay_buffer_in_one_call(tmp_path, episodes) -> None:
    data = load_mdp_file(write_mdp_file(tmp_path / "d.npz", episodes))
    memory = ReplayBuffer(10_000, observation_space=OBS, action_space=ACT, seed=0)
    data.fill(memory)
    assert len(memory) == len(data)
    rows = memory.sample_from_indices(np.arange(len(data)))
    np.testing.assert_array_equal(rows["obs"].numpy(), data.obs)
    np.testing.assert_array_equal(rows["done"].numpy().astype(bool), data.terminated)
    np.testing.assert_array_equal(rows["truncated"].numpy().astype(bool), data.truncated)


def test_hundred_thousand_rows_load_correctly(tmp_path) -> None:
    make_dataset(steps=100_000, epsilon=0.5, seed=0, out=tmp_path / "big.h5")
    data = load_offline_dataset(dataset_path=str(tmp_path / "big.h5"))
    memory = ReplayBuffer(100_000, observation_space=OBS, action_space=ACT)
    data.fill(memory)
    assert len(memory) == 100_000
    # Next observation of a mid-episode row is the following row's observation.
    mid = np.flatnonzero(~(data.terminated | data.truncated))[:-1]
    np.testing.assert_array_equal(data.next_obs[mid], data.obs[mid + 1])


def test_missing_sources_are_config_errors(tmp_path, minari_path) -> None:
    with pytest.raises(ConfigError, match=r"dataset_path: .*nope.h5 does not exist"):
        load_offline_dataset(dataset_path=str(tmp_path / "nope.h5"))
    with pytest.raises(ConfigError, match="minari_dataset_id: 'cartpole/none-v0' is not in"):
        load_offline_dataset(minari_dataset_id="cartpole/none-v0")
    with pytest.raises(ConfigError, match="exactly one"):
        load_offline_dataset()
    bad = tmp_path / "bad.npz"
    np.savez(bad, observations=np.zeros((3, 4)), actions=np.zeros(3, np.int64))
    with pytest.raises(ConfigError, match="lacks rewards, terminals, episode_terminals"):
        load_mdp_file(bad)


def test_a_dataset_that_does_not_fit_the_env_is_refused(tmp_path, episodes) -> None:
    data = load_mdp_file(write_mdp_file(tmp_path / "d.npz", episodes))
    acrobot = gym.make("Acrobot-v1")
    with pytest.raises(ConfigError, match=r"observations of shape \(4,\).*\(6,\)"):
        check_dataset(data, acrobot.observation_space, acrobot.action_space)
    pendulum = gym.make("Pendulum-v1")
    with pytest.raises(ConfigError, match="CQN needs discrete actions"):
        check_dataset(data, pendulum.observation_space, pendulum.action_space)
    data.action = data.action.astype(np.float32)
    with pytest.raises(ConfigError, match="CQN needs discrete actions"):
        check_dataset(data, OBS, ACT)
    data.action = np.full(len(data), 5)
    with pytest.raises(ConfigError, match=r"actions in \[5, 5\]"):
        check_dataset(data, OBS, ACT)


def test_script_writes_the_file_the_conf_reads(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--steps", "300"]) == 0
    data = load_mdp_file(tmp_path / "data" / "cartpole_replay.npz")
    assert len(data) == 300 and data.env_id == "CartPole-v1"
    assert "300 transitions" in capsys.readouterr().out
    assert main(["--policy", "scripted", "--env", "Acrobot-v1", "--steps", "10"]) == 2
    assert "scripted only knows CartPole" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".h5", ".npz"])
@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_a_corrupt_dataset_file_is_a_config_error(tmp_path, episodes, suffix, how) -> None:
    path = write_mdp_file(tmp_path / f"data{suffix}", episodes[:3], env_id="CartPole-v1")
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x00junk" * 50,
                      "empty": b""}[how])  # fmt: skip
    with pytest.raises(ConfigError, match=rf"dataset_path: .*data{suffix} is not a readable"):
        load_offline_dataset(dataset_path=str(path))


@pytest.mark.parametrize(("key", "label"), [("rewards", "reward"), ("observations", "obs")])
def test_non_finite_values_are_refused_when_the_dataset_is_read(
    tmp_path, episodes, key: str, label: str
) -> None:
    path = write_mdp_file(tmp_path / "data.npz", episodes[:3], env_id="CartPole-v1")
    with np.load(path) as handle:
        arrays = {k: handle[k].copy() for k in handle.files}
    arrays[key][5] = np.nan
    np.savez(path, **arrays)
    with pytest.raises(ConfigError, match=r"transition 5 has a non-finite (reward|observation)"):
        load_offline_dataset(dataset_path=str(path))
