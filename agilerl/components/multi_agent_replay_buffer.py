"""A preallocated replay buffer for multi-agent transitions (one tensor per agent and field)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["MultiAgentReplayBuffer"]

FIELDS = ("obs", "action", "reward", "next_obs", "done")


class MultiAgentReplayBuffer:
    """Circular buffer of ``(obs, action, reward, next_obs, done)`` per agent.

    Storage is allocated up front: for each agent and field a tensor of shape
    ``(max_size, *shape)``. Rows are whole joint transitions, so sampled row
    ``j`` of every agent comes from the same env step (what centralised
    critics need).

    Args:
        max_size: Capacity in joint transitions.
        obs_shapes: Per-agent observation shape.
        action_shapes: Per-agent stored action shape (``()`` for a Discrete index).
        action_dtypes: Per-agent action dtype (default float32).
        device: Where sampled batches are returned.
        seed: Seed of the sampling generator.
    """

    def __init__(
        self,
        max_size: int,
        obs_shapes: Mapping[str, tuple[int, ...]],
        action_shapes: Mapping[str, tuple[int, ...]],
        action_dtypes: Mapping[str, torch.dtype] | None = None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
    ) -> None:
        if int(max_size) < 1:
            raise ValueError(f"MultiAgentReplayBuffer max_size must be >= 1, got {max_size}")
        self.max_size = int(max_size)
        self.agents = list(obs_shapes)
        self.device = torch.device(device)
        dtypes = dict(action_dtypes or {})
        n = self.max_size
        self._data: dict[str, dict[str, torch.Tensor]] = {}
        for agent in self.agents:
            obs_shape = tuple(obs_shapes[agent])
            self._data[agent] = {
                "obs": torch.zeros((n, *obs_shape), dtype=torch.float32),
                "action": torch.zeros(
                    (n, *tuple(action_shapes[agent])), dtype=dtypes.get(agent, torch.float32)
                ),
                "reward": torch.zeros(n, dtype=torch.float32),
                "next_obs": torch.zeros((n, *obs_shape), dtype=torch.float32),
                "done": torch.zeros(n, dtype=torch.float32),
            }
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator().manual_seed(0 if seed is None else int(seed))

    def __len__(self) -> int:
        return self.size

    def add(self, mask: np.ndarray | None = None, **fields: Mapping[str, Any]) -> int:
        """Append a batch of joint transitions (one row per env copy).

        Args:
            mask: Optional ``(num_envs,)`` bool; only rows where it is true are stored.
            **fields: ``obs``, ``action``, ``reward``, ``next_obs``, ``done``, each a
                dict of per-agent arrays with a leading ``num_envs`` axis.

        Returns:
            Rows stored.
        """
        missing = [f for f in FIELDS if f not in fields]
        if missing:
            raise ValueError(f"MultiAgentReplayBuffer.add is missing {missing}")
        first = np.asarray(fields["reward"][self.agents[0]])
        rows = np.arange(first.shape[0]) if mask is None else np.flatnonzero(mask)
        count = len(rows)
        if count == 0:
            return 0
        idx = (self.pos + torch.arange(count)) % self.max_size
        for agent in self.agents:
            store = self._data[agent]
            for name in FIELDS:
                value = torch.as_tensor(np.asarray(fields[name][agent])[rows])
                store[name][idx] = value.to(store[name].dtype).reshape(store[name][idx].shape)
        self.pos = (self.pos + count) % self.max_size
        self.size = min(self.size + count, self.max_size)
        return count

    def sample(self, batch_size: int) -> dict[str, dict[str, torch.Tensor]]:
        """``batch_size`` joint transitions drawn uniformly with replacement.

        Returns:
            ``{field: {agent: tensor}}`` on :attr:`device`.

        Raises:
            ValueError: If the buffer is empty.
        """
        if self.size == 0:
            raise ValueError("cannot sample from an empty MultiAgentReplayBuffer")
        idx = torch.randint(0, self.size, (int(batch_size),), generator=self.generator)
        return {
            name: {a: self._data[a][name][idx].to(self.device) for a in self.agents}
            for name in FIELDS
        }

    def state_dict(self) -> dict[str, Any]:
        """Contents, position and generator state as plain tensors (for exact resume)."""
        return {
            "data": {
                a: {k: v[: self.size].clone() for k, v in d.items()} for a, d in self._data.items()
            },
            "pos": self.pos,
            "size": self.size,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (same agents and shapes)."""
        size = int(state["size"])
        for agent, fields in state["data"].items():
            for name, value in fields.items():
                self._data[agent][name][:size] = value
        self.pos = int(state["pos"])
        self.size = size
        self.generator.set_state(state["generator"])
