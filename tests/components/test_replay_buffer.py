"""Replay buffers: circular storage, n-step returns, PER statistics, checkpoints, memory."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from agilerl.components.memory import (
    InsufficientMemoryError,
    check_memory,
    estimate_buffer_bytes,
)
from agilerl.components.replay_buffer import (
    MultiStepReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    sample_members,
)

FIELDS = ("obs", "action", "reward", "next_obs", "done", "truncated")


def _step(num_envs: int, t: int, obs_dim: int = 3) -> dict[str, np.ndarray]:
    """Batch whose values encode (env, t) so rows can be identified."""
    ids = np.arange(num_envs) * 1000 + t
    return {
        "obs": np.repeat(ids[:, None], obs_dim, axis=1).astype(np.float64),
        "action": ids.astype(np.int64),
        "reward": ids.astype(np.float32),
        "next_obs": np.repeat(ids[:, None] + 0.5, obs_dim, axis=1),
        "done": np.zeros(num_envs, bool),
    }


def _roundtrip(state: dict) -> dict:
    handle = io.BytesIO()
    torch.save(state, handle)
    handle.seek(0)
    return torch.load(handle, weights_only=True)


# ----------------------------------------------------------------- ReplayBuffer
def test_add_sample_shapes_and_dtypes() -> None:
    buffer = ReplayBuffer(10, seed=0)
    assert len(buffer) == 0 and not buffer.allocated
    buffer.add(**_step(4, 0))
    assert len(buffer) == buffer.size == buffer.counter == 4
    batch = buffer.sample(6, return_idx=True)
    assert set(batch) == {*FIELDS, "idxs"}
    assert batch["obs"].shape == (6, 3) and batch["obs"].dtype == torch.float32  # f64 -> f32
    assert batch["action"].shape == (6,) and batch["action"].dtype == torch.int64
    assert batch["reward"].shape == (6,) and batch["reward"].dtype == torch.float32
    assert batch["done"].dtype == torch.float32 and batch["truncated"].dtype == torch.float32
    assert batch["idxs"].dtype == torch.int64 and int(batch["idxs"].max()) < 4
    # sampled rows are consistent transitions
    np.testing.assert_array_equal(batch["obs"][:, 0].numpy(), batch["action"].numpy())
    np.testing.assert_array_equal(batch["next_obs"][:, 0].numpy(), batch["action"].numpy() + 0.5)


def test_single_transition_inferred_from_scalar_reward() -> None:
    buffer = ReplayBuffer(10)
    buffer.add(np.ones(3), 2, 1.5, np.zeros(3), True)
    assert buffer.size == 1
    batch = buffer.sample_from_indices([0])
    assert batch["obs"].shape == (1, 3) and batch["done"].tolist() == [1.0]
    # explicit flag: a length-1 batch vs a single transition with a vector reward-like input
    buffer.add(np.ones((1, 3)), np.array([3]), np.array([2.0]), np.zeros((1, 3)), np.array([0]))
    buffer.add(np.ones(3), 4, np.float32(2.5), np.zeros(3), False, is_vectorised=False)
    assert buffer.size == 3
    assert buffer.sample_from_indices([1, 2])["action"].tolist() == [3, 4]


def test_mismatched_batch_is_rejected() -> None:
    buffer = ReplayBuffer(10)
    step = _step(3, 0)
    step["done"] = np.zeros(2, bool)
    with pytest.raises(ValueError, match="done"):
        buffer.add(**step)
    buffer.add(**_step(3, 0))
    bad = _step(3, 1, obs_dim=4)
    with pytest.raises(ValueError, match="obs"):
        buffer.add(**bad)
    images = ReplayBuffer(4)
    images.add(np.zeros((1, 3, 2)), [0], [0.0], np.zeros((1, 3, 2)), [0])
    with pytest.raises(ValueError, match="obs"):  # same size, transposed: not silently reshaped
        images.add(np.zeros((1, 2, 3)), [0], [0.0], np.zeros((1, 2, 3)), [0])


def test_circular_overwrite_keeps_newest_rows() -> None:
    buffer = ReplayBuffer(5)
    for t in range(3):  # 3 batches of 3 -> rows wrap after 5
        buffer.add(**_step(3, t))
    assert buffer.counter == 9 and buffer.size == 5 and buffer.pos == 4
    ids = [e * 1000 + t for t in range(3) for e in range(3)]  # insertion order
    expected_rows = {i % 5: ids[i] for i in range(9)}  # later writes win
    stored = buffer.sample_from_indices(np.arange(5))["action"].tolist()
    assert stored == [expected_rows[r] for r in range(5)]
    assert stored == [ids[5], ids[6], ids[7], ids[8], ids[4]]

    # one add larger than the capacity keeps only the newest max_size
    buffer.clear()
    assert len(buffer) == 0
    buffer.add(**_step(12, 7))
    assert buffer.counter == 12 and buffer.size == 5
    stored = sorted(buffer.sample_from_indices(np.arange(5))["action"].tolist())
    assert stored == [e * 1000 + 7 for e in range(7, 12)]


def test_sample_members_draws_what_each_memory_would_draw_alone() -> None:
    def memories() -> list[ReplayBuffer]:
        out = [ReplayBuffer(50, seed=10 + i) for i in range(3)]
        for i, memory in enumerate(out):
            for t in range(5 + i):
                memory.add(**_step(2, 100 * i + t))
        return out

    together, alone = sample_members(memories(), 7), [m.sample(7) for m in memories()]
    assert together is not None and set(together) == set(FIELDS)
    for name in FIELDS:
        expected = torch.cat([batch[name] for batch in alone])
        assert together[name].dtype == expected.dtype and together[name].shape[0] == 21
        torch.testing.assert_close(together[name], expected, rtol=0, atol=0)
    # each memory's generator moved on exactly as one sample(7) moves it
    again, later = memories(), memories()
    sample_members(again, 7)
    for a, b in zip(again, later, strict=True):
        b.sample(7)
        torch.testing.assert_close(a.sample(3)["obs"], b.sample(3)["obs"])


def test_sample_members_leaves_other_buffers_to_their_own_sample() -> None:
    plain, prioritised = ReplayBuffer(10, seed=0), PrioritizedReplayBuffer(10, seed=0)
    for memory in (plain, prioritised):
        memory.add(**_step(2, 0))
    assert sample_members([plain, prioritised], 4) is None
    nested = ReplayBuffer(8)
    obs, nxt = {"vec": np.zeros((2, 3))}, {"vec": np.ones((2, 3))}
    nested.add(obs, np.array([0, 1]), np.zeros(2), nxt, np.zeros(2))
    assert sample_members([nested, nested], 2) is None
    assert sample_members([plain, ReplayBuffer(10)], 2) is None  # nothing stored yet
    emptied = ReplayBuffer(10)
    emptied.add(**_step(1, 0))
    emptied.clear()
    with pytest.raises(ValueError, match="empty"):
        sample_members([plain, emptied], 2)


def test_dict_observations_and_uint8_storage() -> None:
    buffer = ReplayBuffer(8)
    for t in range(3):
        obs = {
            "image": np.full((2, 4, 4, 3), t, np.uint8),
            "vec": np.full((2, 5), t, np.float64),
        }
        nxt = {"image": obs["image"] + 1, "vec": obs["vec"] + 1}
        buffer.add(obs, np.array([0, 1]), np.zeros(2), nxt, np.zeros(2))
    fields = buffer.fields
    assert fields["obs"]["image"].dtype == torch.uint8
    assert fields["obs"]["vec"].dtype == torch.float32
    batch = buffer.sample_from_indices([0, 5])
    assert batch["obs"]["image"].dtype == torch.uint8
    assert batch["obs"]["image"].shape == (2, 4, 4, 3)
    assert batch["obs"]["image"][:, 0, 0, 0].tolist() == [0, 2]
    assert batch["next_obs"]["vec"][:, 0].tolist() == [1.0, 3.0]
    image_bytes = 8 * 4 * 4 * 3  # uint8: one byte per pixel, twice (obs, next_obs)
    assert fields["obs"]["image"].nbytes == image_bytes


def test_spaces_allocate_eagerly_with_space_dtypes() -> None:
    obs_space = spaces.Dict(
        {"img": spaces.Box(0, 255, (3, 8, 8), np.uint8), "pos": spaces.Box(-1, 1, (2,))}
    )
    buffer = ReplayBuffer(16, observation_space=obs_space, action_space=spaces.Discrete(3))
    assert buffer.allocated
    fields = buffer.fields
    assert fields["obs"]["img"].shape == (16, 3, 8, 8) and fields["obs"]["img"].dtype == torch.uint8
    assert fields["action"].shape == (16,) and fields["action"].dtype == torch.int64
    expected = estimate_buffer_bytes(16, obs_space, spaces.Discrete(3))
    assert buffer.nbytes == expected
    obs = {"img": np.zeros((2, 3, 8, 8), np.uint8), "pos": np.zeros((2, 2))}
    buffer.add(obs, np.array([[1], [2]]), np.ones(2), obs, np.zeros(2))  # [N, 1] actions fit
    assert buffer.sample_from_indices([0, 1])["action"].tolist() == [1, 2]


def test_tuple_observations_become_string_keys() -> None:
    buffer = ReplayBuffer(4)
    obs = (np.zeros((2, 3)), np.ones((2, 1), np.int64))
    buffer.add(obs, np.zeros(2), np.zeros(2), obs, np.zeros(2))
    batch = buffer.sample(3)
    assert set(batch["obs"]) == {"0", "1"} and batch["obs"]["1"].dtype == torch.int64


def test_sample_errors() -> None:
    buffer = ReplayBuffer(4)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(2)
    buffer.add(**_step(2, 0))
    with pytest.raises(IndexError):
        buffer.sample_from_indices([2])


@pytest.mark.parametrize("n_added", [3, 7, 12])
def test_state_dict_roundtrip_weights_only(n_added: int) -> None:
    buffer = ReplayBuffer(7)
    for t in range(n_added):
        buffer.add(**_step(1, t))
    state = _roundtrip(buffer.state_dict())
    assert all(isinstance(v, int | str | torch.Tensor | dict) for v in state.values())
    restored = ReplayBuffer(7, seed=12345)
    restored.load_state_dict(state)
    assert restored.counter == buffer.counter and restored.size == buffer.size
    if buffer.size:  # the sampling generator comes back too: the next draws are the same
        drawn, again = buffer.sample(5), restored.sample(5)
        for name, value in drawn.items():
            torch.testing.assert_close(again[name], value)
    rows = np.arange(buffer.size)
    for name in FIELDS:
        torch.testing.assert_close(
            restored.sample_from_indices(rows)[name], buffer.sample_from_indices(rows)[name]
        )
    buffer.add(**_step(1, 99))
    restored.add(**_step(1, 99))
    assert restored.pos == buffer.pos
    torch.testing.assert_close(restored.fields["obs"], buffer.fields["obs"])
    with pytest.raises(ValueError, match="max_size"):
        ReplayBuffer(8).load_state_dict(state)


def test_state_dict_of_empty_buffer() -> None:
    state = _roundtrip(ReplayBuffer(3).state_dict())
    restored = ReplayBuffer(3)
    restored.load_state_dict(state)
    assert restored.size == 0 and not restored.allocated


# -------------------------------------------------------------------- memory
def test_memory_refusal_mentions_bytes() -> None:
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(InsufficientMemoryError, match="bytes") as info:
        ReplayBuffer(10**9, observation_space=obs_space, action_space=spaces.Discrete(4))
    needed = estimate_buffer_bytes(10**9, obs_space, spaces.Discrete(4))
    assert f"{needed:,}" in str(info.value) and "available" in str(info.value)
    # lazily allocated buffers are checked on the first add as well
    lazy = PrioritizedReplayBuffer(10**9)
    with pytest.raises(MemoryError, match="bytes"):
        lazy.add(np.zeros((1, 4, 84, 84), np.uint8), [0], [0.0], np.zeros((1, 4, 84, 84)), [0])
    assert not lazy.allocated


def test_estimate_buffer_bytes_counts_every_field() -> None:
    box = spaces.Box(-1, 1, (8,), np.float32)
    per_item = 2 * 8 * 4 + 8 + 4 + 1 + 1  # obs + next_obs, int64 action, reward, done, truncated
    assert estimate_buffer_bytes(100, box, spaces.Discrete(2)) == 100 * per_item
    assert estimate_buffer_bytes(100, box, spaces.Discrete(2), n_step=True) == 100 * (per_item + 4)
    trees = 2 * 2 * 128 * 8
    assert estimate_buffer_bytes(100, box, spaces.Discrete(2), prioritized=True) == (
        100 * per_item + trees
    )
    check_memory(10, available=10)
    with pytest.raises(InsufficientMemoryError, match="11 bytes"):
        check_memory(11, available=10)


# ------------------------------------------------------------ MultiStepReplayBuffer
def _feed(buffer, events, rewards, main=None) -> list[dict]:
    """Feed a [T, E] event grid ('' / 'term' / 'trunc'); obs = [e, t], next_obs = [e, t + .5]."""
    returned = []
    T, E = len(events), len(events[0])
    for t in range(T):
        one = buffer.add(
            obs=np.array([[e, t] for e in range(E)], np.float32),
            action=np.arange(E) + 10 * t,
            reward=np.asarray(rewards[t], np.float32),
            next_obs=np.array([[e, t + 0.5] for e in range(E)], np.float32),
            done=np.array([ev == "term" for ev in events[t]]),
            truncated=np.array([ev == "trunc" for ev in events[t]]),
        )
        returned.append(one)
        if one is not None and main is not None:
            main.add(**one)
    return returned


def test_n_step_returns_hand_computed_two_envs() -> None:
    """env0: terminates at t=1, truncated at t=6, new episode at t=7 (pending).
    env1: truncated at t=3, terminates at t=7. n=3, gamma=0.5."""
    events = [
        ["", ""],
        ["term", ""],
        ["", ""],
        ["", "trunc"],
        ["", ""],
        ["", ""],
        ["trunc", ""],
        ["", "term"],
    ]
    rewards = [[t + 1, 10 * (t + 1)] for t in range(8)]
    buffer = MultiStepReplayBuffer(100, n_step=3, gamma=0.5)
    main = PrioritizedReplayBuffer(100, alpha=0.6)
    _feed(buffer, events, rewards, main)
    # (env, t, R, last step of the window, done, truncated, n_steps) in storage order
    expected = [
        (0, 0, 1 + 0.5 * 2, 1, 1, 0, 2),
        (0, 1, 2.0, 1, 1, 0, 1),
        (1, 0, 10 + 0.5 * 20 + 0.25 * 30, 2, 0, 0, 3),
        (1, 1, 20 + 0.5 * 30 + 0.25 * 40, 3, 0, 1, 3),
        (1, 2, 30 + 0.5 * 40, 3, 0, 1, 2),
        (1, 3, 40.0, 3, 0, 1, 1),
        (0, 2, 3 + 0.5 * 4 + 0.25 * 5, 4, 0, 0, 3),
        (0, 3, 4 + 0.5 * 5 + 0.25 * 6, 5, 0, 0, 3),
        (0, 4, 5 + 0.5 * 6 + 0.25 * 7, 6, 0, 1, 3),
        (0, 5, 6 + 0.5 * 7, 6, 0, 1, 2),
        (0, 6, 7.0, 6, 0, 1, 1),
        (1, 4, 50 + 0.5 * 60 + 0.25 * 70, 6, 0, 0, 3),
        (1, 5, 60 + 0.5 * 70 + 0.25 * 80, 7, 1, 0, 3),
        (1, 6, 70 + 0.5 * 80, 7, 1, 0, 2),
        (1, 7, 80.0, 7, 1, 0, 1),
    ]
    assert buffer.size == len(expected) == 15  # (env0, t=7) still waits in its window
    got = buffer.sample_from_indices(np.arange(15))
    np.testing.assert_array_equal(got["obs"].numpy(), [[e, t] for e, t, *_ in expected])
    np.testing.assert_allclose(got["reward"].numpy(), [r for _, _, r, *_ in expected])
    np.testing.assert_array_equal(
        got["next_obs"].numpy(), [[e, last + 0.5] for e, _, _, last, *_ in expected]
    )
    assert got["done"].tolist() == [float(x[4]) for x in expected]
    assert got["truncated"].tolist() == [float(x[5]) for x in expected]
    assert got["n_steps"].tolist() == [x[6] for x in expected]
    assert got["action"].tolist() == [e + 10 * t for e, t, *_ in expected]

    # the PER memory fed the returned one-step transitions is index-aligned
    one = main.sample_from_indices(np.arange(15))
    np.testing.assert_array_equal(one["obs"].numpy(), got["obs"].numpy())
    np.testing.assert_allclose(one["reward"].numpy(), [rewards[t][e] for e, t, *_ in expected])
    np.testing.assert_array_equal(one["next_obs"].numpy(), [[e, t + 0.5] for e, t, *_ in expected])
    one_done = [float(events[t][e] == "term") for e, t, *_ in expected]
    one_trunc = [float(events[t][e] == "trunc") for e, t, *_ in expected]
    assert one["done"].tolist() == one_done and one["truncated"].tolist() == one_trunc
    batch = main.sample(32, beta=0.4)
    n_step = buffer.sample_from_indices(batch["idxs"])
    torch.testing.assert_close(n_step["obs"], batch["obs"])
    torch.testing.assert_close(n_step["action"], batch["action"])


def _reference(events, rewards, n: int, gamma: float):
    """Straightforward n-step transitions per (env, t), plus the steps still pending."""
    T, E = len(events), len(events[0])
    stored, pending = {}, set()
    for e in range(E):
        for t in range(T):
            # steps of the same episode from t on, cut at the first end or after n steps
            k_end = None
            for k in range(t, min(t + n, T)):
                if events[k][e]:
                    k_end = k
                    break
            if k_end is None:
                if t + n - 1 < T:
                    k_end = t + n - 1
                else:
                    pending.add((e, t))
                    continue
            ret = sum(gamma ** (k - t) * rewards[k][e] for k in range(t, k_end + 1))
            stored[(e, t)] = (
                ret,
                k_end + 0.5,
                float(events[k_end][e] == "term"),
                float(events[k_end][e] == "trunc"),
                k_end - t + 1,
            )
    return stored, pending


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    n=st.integers(1, 4),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    small=st.integers(1, 12),
    data=st.data(),
)
def test_n_step_matches_reference(num_envs: int, n: int, gamma: float, small: int, data) -> None:
    T = data.draw(st.integers(1, 20))
    event = st.sampled_from(["", "", "", "term", "trunc"])
    events = data.draw(st.lists(st.lists(event, min_size=num_envs, max_size=num_envs),
                                min_size=T, max_size=T))  # fmt: skip
    rewards = data.draw(st.lists(st.lists(st.integers(-5, 5), min_size=num_envs,
                                          max_size=num_envs), min_size=T, max_size=T))  # fmt: skip
    buffer = MultiStepReplayBuffer(1000, n_step=n, gamma=gamma)
    _feed(buffer, events, rewards)
    expected, pending = _reference(events, rewards, n, gamma)
    assert buffer.size == len(expected)
    assert int(buffer._win_len.sum()) == len(pending)
    got = buffer.sample_from_indices(np.arange(buffer.size)) if buffer.size else None
    seen = set()
    for i in range(buffer.size):
        e, t = (int(v) for v in got["obs"][i].tolist())
        assert (e, t) not in seen  # stored exactly once
        seen.add((e, t))
        ret, nxt, done, trunc, k = expected[(e, t)]
        assert got["reward"][i].item() == pytest.approx(ret, rel=1e-5, abs=1e-4)
        assert got["next_obs"][i].tolist() == [e, nxt]
        assert (got["done"][i].item(), got["truncated"][i].item()) == (done, trunc)
        assert got["n_steps"][i].item() == k

    # combined setup with a small (wrapping) capacity stays index-aligned
    n_small = MultiStepReplayBuffer(small, n_step=n, gamma=gamma)
    main = PrioritizedReplayBuffer(small, alpha=0.6)
    _feed(n_small, events, rewards, main)
    assert main.counter == n_small.counter == buffer.counter
    if main.size:
        rows = np.arange(main.size)
        a, b = main.sample_from_indices(rows), n_small.sample_from_indices(rows)
        torch.testing.assert_close(a["obs"], b["obs"])
        for i in rows:
            e, t = (int(v) for v in a["obs"][i].tolist())
            assert a["reward"][i].item() == rewards[t][e]
            assert a["next_obs"][i].tolist() == [e, t + 0.5]


def test_n_step_one_equals_plain_buffer() -> None:
    events = [["", "trunc"], ["term", ""], ["", ""]]
    rewards = [[1, 2], [3, 4], [5, 6]]
    buffer = MultiStepReplayBuffer(10, n_step=1, gamma=0.9)
    returned = _feed(buffer, events, rewards)
    assert all(r is not None and r["obs"].shape[0] == 2 for r in returned)
    assert buffer.size == 6 and buffer.sample(5)["n_steps"].tolist() == [1] * 5


def test_n_step_dict_observations_and_env_count() -> None:
    buffer = MultiStepReplayBuffer(10, n_step=2, gamma=1.0)
    for t in range(3):
        obs = {"a": np.full((2, 1), t, np.uint8), "b": np.full((2, 2), t, np.float32)}
        nxt = {"a": obs["a"] + 1, "b": obs["b"] + 1}
        buffer.add(obs, np.zeros(2, np.int64), np.ones(2), nxt, np.zeros(2), np.zeros(2))
    assert buffer.size == 4
    batch = buffer.sample_from_indices([0, 1, 2, 3])
    assert batch["obs"]["a"].dtype == torch.uint8
    assert batch["obs"]["a"][:, 0].tolist() == [0, 0, 1, 1]
    assert batch["next_obs"]["b"][:, 0].tolist() == [2.0, 2.0, 3.0, 3.0]
    assert batch["reward"].tolist() == [2.0] * 4
    with pytest.raises(ValueError, match="envs"):
        buffer.add(**_step(3, 0))


def test_n_step_state_dict_resumes_windows() -> None:
    events = [["", ""], ["", "trunc"], ["", ""], ["term", ""], ["", ""]]
    rewards = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    first = MultiStepReplayBuffer(6, n_step=3, gamma=0.9)
    _feed(first, events[:2], rewards[:2])
    restored = MultiStepReplayBuffer(6, n_step=3, gamma=0.9)
    restored.load_state_dict(_roundtrip(first.state_dict()))
    for buffer in (first, restored):
        for t in range(2, 5):
            buffer.add(
                obs=np.array([[0, t], [1, t]], np.float32),
                action=np.zeros(2, np.int64),
                reward=np.asarray(rewards[t], np.float32),
                next_obs=np.array([[0, t + 0.5], [1, t + 0.5]], np.float32),
                done=np.array([ev == "term" for ev in events[t]]),
                truncated=np.array([ev == "trunc" for ev in events[t]]),
            )
    assert restored.counter == first.counter
    for name in (*FIELDS, "n_steps"):
        torch.testing.assert_close(restored.fields[name], first.fields[name])
    with pytest.raises(ValueError, match="n_step"):
        MultiStepReplayBuffer(6, n_step=2).load_state_dict(first.state_dict())


# ------------------------------------------------------------ PrioritizedReplayBuffer
def _per_with(priorities: np.ndarray, alpha: float, seed: int = 0) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(len(priorities), alpha=alpha, seed=seed)
    buffer.add(**_step(len(priorities), 0, obs_dim=1))
    buffer.update_priorities(np.arange(len(priorities)), priorities)
    return buffer


def test_per_sampling_frequencies_follow_priorities() -> None:
    priorities = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 8.0, 0.1, 1.5])
    alpha = 0.7
    buffer = _per_with(priorities, alpha, seed=1234)
    counts = np.zeros(len(priorities))
    rounds, batch_size = 300, 64
    for _ in range(rounds):
        idxs = buffer.sample(batch_size)["idxs"].numpy()
        counts += np.bincount(idxs, minlength=len(priorities))
    probs = priorities**alpha / (priorities**alpha).sum()
    expected = probs * rounds * batch_size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 24.32, (chi2, counts, expected)  # df = 7, p = 0.001
    np.testing.assert_allclose(counts / counts.sum(), probs, atol=0.01)


def test_per_importance_weights_match_formula() -> None:
    priorities = np.array([0.2, 1.0, 3.0, 0.7, 5.0, 2.0])
    alpha, beta = 0.6, 0.5
    buffer = _per_with(priorities, alpha)
    batch = buffer.sample(40, beta=beta)
    idxs = batch["idxs"].numpy()
    n = len(priorities)
    probs = priorities**alpha / (priorities**alpha).sum()
    weights = (n * probs) ** -beta
    expected = weights[idxs] / weights.max()
    np.testing.assert_allclose(batch["weights"].numpy(), expected, rtol=1e-5)
    assert batch["weights"].dtype == torch.float32 and float(batch["weights"].max()) <= 1.0
    # sampled rows are the stored transitions at idxs
    np.testing.assert_array_equal(batch["action"].numpy(), idxs * 1000)


def test_per_stratified_batch_and_uniform_alpha_zero() -> None:
    buffer = _per_with(np.ones(16), alpha=0.6)
    idxs = buffer.sample(16)["idxs"].numpy()
    assert sorted(idxs.tolist()) == list(range(16))  # one draw per equal segment
    flat = _per_with(np.array([1.0, 100.0, 0.01]), alpha=0.0)
    assert torch.all(flat.sample(30, beta=1.0)["weights"] == 1.0)


def test_per_new_items_get_max_priority_and_validation() -> None:
    alpha = 0.5
    buffer = PrioritizedReplayBuffer(10, alpha=alpha)
    buffer.add(**_step(3, 0))
    assert buffer.sum_tree[0] == 1.0  # initial max priority 1
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([9.0, 0.25]))
    assert buffer.max_priority == 9.0
    buffer.add(**_step(2, 1))
    np.testing.assert_allclose(buffer.sum_tree[[0, 1, 2, 3, 4]], [3.0, 0.5, 1.0, 3.0, 3.0])
    assert buffer.min_tree.min() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive"):
        buffer.update_priorities([0], [0.0])
    with pytest.raises(ValueError, match="positive"):
        buffer.update_priorities([0], [float("nan")])
    with pytest.raises(ValueError, match="indices"):
        buffer.update_priorities([0, 1], [1.0])
    with pytest.raises(IndexError):
        buffer.update_priorities([5], [1.0])


def test_per_overwrite_resets_priority_and_state_roundtrip() -> None:
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, seed=3)
    buffer.add(**_step(4, 0))
    buffer.update_priorities([0, 1, 2, 3], [5.0, 0.5, 2.0, 1.0])
    buffer.add(**_step(1, 1))  # overwrites row 0 with max priority 5
    assert buffer.sum_tree[0] == 5.0 and buffer.sum_tree.total() == pytest.approx(8.5)
    state = _roundtrip(buffer.state_dict())
    restored = PrioritizedReplayBuffer(4, alpha=1.0, seed=3)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.sum_tree.tree, buffer.sum_tree.tree)
    np.testing.assert_array_equal(restored.min_tree.tree, buffer.min_tree.tree)
    assert restored.max_priority == 5.0
    a, b = buffer.sample(8, beta=0.4), restored.sample(8, beta=0.4)
    for key in ("idxs", "weights", "obs"):
        torch.testing.assert_close(a[key], b[key])
    buffer.clear()
    assert buffer.size == 0 and buffer.sum_tree.total() == 0.0 and buffer.max_priority == 1.0
