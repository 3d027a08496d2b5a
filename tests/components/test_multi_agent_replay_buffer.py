"""The preallocated multi-agent replay buffer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agilerl.components.multi_agent_replay_buffer import MultiAgentReplayBuffer


def _buffer(max_size: int = 5, seed: int = 0) -> MultiAgentReplayBuffer:
    return MultiAgentReplayBuffer(
        max_size,
        {"speaker_0": (3,), "listener_0": (11,)},
        {"speaker_0": (), "listener_0": (5,)},
        {"speaker_0": torch.int64},
        seed=seed,
    )


def _batch(start: int, n: int = 2) -> dict:
    rows = np.arange(start, start + n, dtype=np.float32)
    return {
        "obs": {
            "speaker_0": np.repeat(rows[:, None], 3, 1),
            "listener_0": np.repeat(rows[:, None], 11, 1),
        },
        "action": {
            "speaker_0": rows.astype(np.int64) % 3,
            "listener_0": np.repeat(rows[:, None], 5, 1),
        },
        "reward": {"speaker_0": rows, "listener_0": -rows},
        "next_obs": {
            "speaker_0": np.repeat(rows[:, None] + 1, 3, 1),
            "listener_0": np.repeat(rows[:, None] + 1, 11, 1),
        },
        "done": {"speaker_0": rows > 100, "listener_0": rows > 100},
    }


def test_storage_is_preallocated_per_agent_and_rows_stay_joint() -> None:
    buffer = _buffer()
    assert buffer._data["listener_0"]["obs"].shape == (5, 11)
    assert buffer._data["speaker_0"]["action"].dtype == torch.int64
    buffer.add(**_batch(0, 3))
    sample = buffer.sample(16)
    assert sample["obs"]["listener_0"].shape == (16, 11)
    assert sample["action"]["speaker_0"].shape == (16,)
    # Row j of every agent and field comes from the same joint transition.
    torch.testing.assert_close(sample["reward"]["speaker_0"], -sample["reward"]["listener_0"])
    torch.testing.assert_close(sample["obs"]["listener_0"][:, 0], sample["reward"]["speaker_0"])
    torch.testing.assert_close(
        sample["next_obs"]["speaker_0"][:, 0], sample["reward"]["speaker_0"] + 1
    )


def test_wraps_around_at_capacity_and_masks_rows() -> None:
    buffer = _buffer(max_size=5)
    buffer.add(**_batch(0, 4))
    buffer.add(**_batch(4, 3))
    assert len(buffer) == 5
    assert sorted(buffer._data["speaker_0"]["reward"].tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert buffer.add(mask=np.array([False, True]), **_batch(10, 2)) == 1
    assert 11.0 in buffer._data["speaker_0"]["reward"].tolist()
    assert 10.0 not in buffer._data["speaker_0"]["reward"].tolist()


def test_sampling_is_seeded_and_state_round_trips() -> None:
    first, second, other = _buffer(10, seed=1), _buffer(10, seed=1), _buffer(10, seed=2)
    for buffer in (first, second, other):
        buffer.add(**_batch(0, 8))
    a, b, c = (buf.sample(6)["reward"]["speaker_0"] for buf in (first, second, other))
    assert torch.equal(a, b) and not torch.equal(a, c)
    state = first.state_dict()
    restored = _buffer(10, seed=99)
    restored.load_state_dict(state)
    torch.testing.assert_close(
        restored.sample(6)["reward"]["speaker_0"], first.sample(6)["reward"]["speaker_0"]
    )


def test_empty_buffer_and_missing_fields_raise() -> None:
    buffer = _buffer()
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1)
    batch = _batch(0)
    del batch["done"]
    with pytest.raises(ValueError, match="done"):
        buffer.add(**batch)
