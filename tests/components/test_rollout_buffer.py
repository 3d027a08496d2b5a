"""RolloutBuffer: GAE against a hand computation, minibatch coverage, composite obs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from agilerl.components.rollout_buffer import RolloutBuffer

OBS = spaces.Box(-10.0, 10.0, (2,), np.float32)
ACT = spaces.Discrete(2)


def _fill(buffer: RolloutBuffer, rewards, values, terminated, truncated, bootstrap) -> None:
    n = buffer.num_envs
    for t in range(len(rewards)):
        buffer.add(
            obs=np.zeros((n, 2), np.float32),
            action=np.zeros(n, np.int64),
            log_prob=np.zeros(n, np.float32),
            reward=np.asarray(rewards[t], np.float32),
            value=np.asarray(values[t], np.float32),
            terminated=np.asarray(terminated[t], bool),
            truncated=np.asarray(truncated[t], bool),
            bootstrap_value=None if bootstrap[t] is None else np.asarray(bootstrap[t], np.float32),
        )


def test_gae_matches_hand_computation_with_termination_and_truncation() -> None:
    gamma, lam = 0.9, 0.8
    buffer = RolloutBuffer(4, 1, OBS, ACT, gamma=gamma, gae_lambda=lam)
    # t0: normal; t1: terminated; t2: truncated with V(final_obs) = 5; t3: normal.
    rewards = [[1.0], [2.0], [3.0], [4.0]]
    values = [[0.5], [1.5], [2.5], [3.5]]
    terminated = [[False], [True], [False], [False]]
    truncated = [[False], [False], [True], [False]]
    bootstrap = [None, None, [5.0], None]
    _fill(buffer, rewards, values, terminated, truncated, bootstrap)
    last_value = 10.0
    buffer.compute_returns_and_advantages(np.array([last_value], np.float32))

    # Hand computation, backwards.
    d3 = 4.0 + gamma * last_value - 3.5  # episode continues past the rollout
    a3 = d3
    d2 = 3.0 + gamma * 5.0 - 2.5  # truncated: bootstrap from the final obs, stop at the boundary
    a2 = d2
    d1 = 2.0 - 1.5  # terminated: no bootstrap
    a1 = d1
    d0 = 1.0 + gamma * 1.5 - 0.5
    a0 = d0 + gamma * lam * a1
    expected = torch.tensor([[a0], [a1], [a2], [a3]])
    torch.testing.assert_close(buffer.advantages, expected)
    torch.testing.assert_close(buffer.returns, expected + torch.tensor(values))
    torch.testing.assert_close(buffer.rewards, torch.tensor(rewards))  # raw rewards kept


def test_gae_vectorised_over_envs_matches_per_env_loop() -> None:
    rng = np.random.default_rng(0)
    T, N, gamma, lam = 9, 3, 0.97, 0.9
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    terminated = rng.random((T, N)) < 0.15
    truncated = (rng.random((T, N)) < 0.15) & ~terminated
    boot = rng.normal(size=(T, N)).astype(np.float32)
    last = rng.normal(size=N).astype(np.float32)
    buffer = RolloutBuffer(T, N, OBS, ACT, gamma=gamma, gae_lambda=lam)
    _fill(buffer, rewards, values, terminated, truncated, list(boot))
    buffer.compute_returns_and_advantages(last)
    for env in range(N):
        adv = np.zeros(T)
        running = 0.0
        for t in reversed(range(T)):
            done = terminated[t, env] or truncated[t, env]
            next_v = last[env] if t == T - 1 else values[t + 1, env]
            r = rewards[t, env] + (gamma * boot[t, env] if truncated[t, env] else 0.0)
            delta = r + gamma * next_v * (not done) - values[t, env]
            running = delta + gamma * lam * (not done) * running
            adv[t] = running
        np.testing.assert_allclose(buffer.advantages[:, env].numpy(), adv, rtol=1e-5, atol=1e-5)


def test_step_both_terminated_and_truncated_is_terminal() -> None:
    buffer = RolloutBuffer(1, 1, OBS, ACT, gamma=0.5, gae_lambda=1.0)
    _fill(buffer, [[1.0]], [[0.0]], [[True]], [[True]], [[8.0]])
    buffer.compute_returns_and_advantages(np.array([4.0]))
    torch.testing.assert_close(buffer.advantages[0], torch.tensor([1.0]))


def test_last_done_suppresses_bootstrap() -> None:
    buffer = RolloutBuffer(1, 2, OBS, ACT, gamma=0.5, gae_lambda=1.0)
    _fill(buffer, [[1.0, 1.0]], [[0.0, 0.0]], [[False, False]], [[False, False]], [None])
    buffer.compute_returns_and_advantages(np.array([4.0, 4.0]), last_done=np.array([True, False]))
    torch.testing.assert_close(buffer.advantages[0], torch.tensor([1.0, 3.0]))


@pytest.mark.parametrize("batch_size", [1, 7, 8, 24, 100])
def test_minibatches_cover_every_sample_once(batch_size: int) -> None:
    T, N = 6, 4
    buffer = RolloutBuffer(T, N, OBS, ACT)
    for t in range(T):
        ids = np.arange(t * N, (t + 1) * N, dtype=np.float32)
        buffer.add(
            np.stack([ids, -ids], axis=1),
            np.arange(N) % 2,
            ids,
            np.zeros(N),
            ids * 2,
            np.zeros(N, bool),
            np.zeros(N, bool),
        )
    buffer.compute_returns_and_advantages(np.zeros(N))
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):  # two epochs, each must be a partition
        seen = []
        sizes = []
        for batch in buffer.get_minibatches(batch_size, generator=gen):
            ids = batch["observations"][:, 0]
            torch.testing.assert_close(batch["log_probs"], ids)  # fields stay aligned
            torch.testing.assert_close(batch["values"], ids * 2)
            assert torch.equal(batch["actions"], ids.long() % N % 2)
            seen.append(ids)
            sizes.append(len(ids))
        all_ids = torch.cat(seen).long().sort().values
        assert torch.equal(all_ids, torch.arange(T * N))
        assert all(s == min(batch_size, T * N) for s in sizes[:-1])


def test_dict_observations_and_continuous_actions() -> None:
    obs_space = spaces.Dict(
        {"img": spaces.Box(0, 255, (3, 4, 4), np.uint8), "pos": spaces.Box(-1, 1, (2,))}
    )
    act_space = spaces.Box(-1, 1, (3,))
    buffer = RolloutBuffer(3, 2, obs_space, act_space)
    assert buffer.observations["img"].dtype == torch.uint8
    for t in range(3):
        buffer.add(
            {"img": np.full((2, 3, 4, 4), t, np.uint8), "pos": np.full((2, 2), t, np.float32)},
            np.full((2, 3), 0.5, np.float32),
            np.zeros(2),
            np.ones(2),
            np.zeros(2),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    buffer.compute_returns_and_advantages(np.zeros(2))
    batches = list(buffer.get_minibatches(4))
    assert sum(b["actions"].shape[0] for b in batches) == 6
    assert batches[0]["observations"]["img"].shape[1:] == (3, 4, 4)
    assert batches[0]["actions"].shape[1:] == (3,)


def test_buffer_guards() -> None:
    buffer = RolloutBuffer(1, 1, OBS, ACT)
    with pytest.raises(ValueError, match="empty"):
        buffer.compute_returns_and_advantages(np.zeros(1))
    _fill(buffer, [[0.0]], [[0.0]], [[False]], [[False]], [None])
    with pytest.raises(RuntimeError, match="compute_returns_and_advantages"):
        next(buffer.get_minibatches(1))
    with pytest.raises(IndexError, match="full"):
        _fill(buffer, [[0.0]], [[0.0]], [[False]], [[False]], [None])
    buffer.reset()
    assert buffer.pos == 0 and not buffer.full


@settings(max_examples=30, deadline=None)
@given(
    T=st.integers(1, 7),
    N=st.integers(1, 5),
    batch_size=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_minibatch_partition_property(T: int, N: int, batch_size: int, seed: int) -> None:
    buffer = RolloutBuffer(T, N, OBS, ACT)
    for t in range(T):
        ids = np.arange(t * N, (t + 1) * N, dtype=np.float32)
        zeros = np.zeros(N)
        buffer.add(np.stack([ids, ids], 1), zeros, ids, zeros, zeros, zeros > 1, zeros > 1)
    buffer.compute_returns_and_advantages(np.zeros(N))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.cat([b["log_probs"] for b in buffer.get_minibatches(batch_size, generator=gen)])
    assert torch.equal(ids.sort().values, torch.arange(T * N, dtype=torch.float32))
