"""A preallocated replay buffer for multi-agent transitions (one tensor per agent and field)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["MultiAgentReplayBuffer"]

FIELDS = ("obs", "action", "reward", "next_obs", "done")
MASK_FIELDS = ("action_mask", "next_action_mask")
"""Legal actions in ``obs`` and ``next_obs`` of masked agents (with ``mask_sizes``)."""


class _Block(NamedTuple):
    """Same-dtype columns of one field for several agents: ``(agent, start, width, shape)``."""

    data: torch.Tensor
    columns: list[tuple[str, int, int, tuple[int, ...]]]


class MultiAgentReplayBuffer:
    """Circular buffer of ``(obs, action, reward, next_obs, done)`` per agent.

    Storage is allocated up front: for each field, one ``(max_size, width)``
    tensor per dtype holding every agent's flattened values side by side
    (``_data[agent][field]`` are ``(max_size, *shape)`` views into it). Rows
    are whole joint transitions, so sampled row ``j`` of every agent comes
    from the same env step (what centralised critics need), and a sample is
    one indexed gather per field.

    Args:
        max_size: Capacity in joint transitions.
        obs_shapes: Per-agent observation shape.
        action_shapes: Per-agent stored action shape (``()`` for a Discrete index).
        action_dtypes: Per-agent action dtype (default float32).
        device: Where sampled batches are returned.
        seed: Seed of the sampling generator.
        mask_sizes: Actions of each masked agent: their legal actions are stored
            too (:data:`MASK_FIELDS`, bool ``(n,)`` rows).
    """

    def __init__(
        self,
        max_size: int,
        obs_shapes: Mapping[str, tuple[int, ...]],
        action_shapes: Mapping[str, tuple[int, ...]],
        action_dtypes: Mapping[str, torch.dtype] | None = None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        mask_sizes: Mapping[str, int] | None = None,
    ) -> None:
        if int(max_size) < 1:
            raise ValueError(f"MultiAgentReplayBuffer max_size must be >= 1, got {max_size}")
        self.max_size = int(max_size)
        self.agents = list(obs_shapes)
        self.device = torch.device(device)
        dtypes = dict(action_dtypes or {})
        layout = {
            "obs": {a: (tuple(obs_shapes[a]), torch.float32) for a in self.agents},
            "action": {
                a: (tuple(action_shapes[a]), dtypes.get(a, torch.float32)) for a in self.agents
            },
            "reward": {a: ((), torch.float32) for a in self.agents},
            "next_obs": {a: (tuple(obs_shapes[a]), torch.float32) for a in self.agents},
            "done": {a: ((), torch.float32) for a in self.agents},
        }
        masks = {a: ((int(n),), torch.bool) for a, n in (mask_sizes or {}).items()}
        if masks:
            layout.update(dict.fromkeys(MASK_FIELDS, masks))
        self.fields = tuple(layout)
        self._blocks: dict[str, list[_Block]] = {}
        self._data: dict[str, dict[str, torch.Tensor]] = {a: {} for a in self.agents}
        for name, per_agent in layout.items():
            self._blocks[name] = []
            for dtype in dict.fromkeys(d for _, d in per_agent.values()):
                members = [(a, shape) for a, (shape, d) in per_agent.items() if d == dtype]
                widths = [math.prod(shape) for _, shape in members]
                data = torch.zeros((self.max_size, sum(widths)), dtype=dtype)
                columns, start = [], 0
                for (agent, shape), width in zip(members, widths, strict=True):
                    columns.append((agent, start, width, shape))
                    self._data[agent][name] = _view(data, start, width, shape)
                    start += width
                self._blocks[name].append(_Block(data, columns))
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator().manual_seed(0 if seed is None else int(seed))

    def __len__(self) -> int:
        return self.size

    def add(self, mask: np.ndarray | None = None, **fields: Mapping[str, Any]) -> int:
        """Append a batch of joint transitions (one row per env copy).

        Args:
            mask: Optional ``(num_envs,)`` bool; only rows where it is true are stored.
            **fields: ``obs``, ``action``, ``reward``, ``next_obs``, ``done`` (and the
                :data:`MASK_FIELDS` of masked agents), each a dict of per-agent arrays
                with a leading ``num_envs`` axis.

        Returns:
            Rows stored.
        """
        missing = [f for f in self.fields if f not in fields]
        if missing:
            raise ValueError(f"MultiAgentReplayBuffer.add is missing {missing}")
        rows = None if mask is None else np.flatnonzero(mask)
        count = len(np.asarray(fields["reward"][self.agents[0]])) if rows is None else len(rows)
        if count == 0:
            return 0
        if self.pos + count <= self.max_size:
            where: slice | np.ndarray = slice(self.pos, self.pos + count)
        else:
            where = (self.pos + np.arange(count)) % self.max_size
        for name in self.fields:
            for block in self._blocks[name]:
                parts = []
                for agent, _, width, _ in block.columns:
                    value = np.asarray(fields[name][agent])
                    if rows is not None:
                        value = value[rows]
                    parts.append(value.reshape(count, width))
                joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
                # storage is CPU: written through a numpy view (casting like ``.to(dtype)``),
                # a fraction of what converting and assigning a tensor costs at these sizes
                block.data.numpy()[where] = joined
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
        batch: dict[str, dict[str, torch.Tensor]] = {}
        for name, blocks in self._blocks.items():
            out = batch[name] = {}
            for block in blocks:
                rows = block.data.index_select(0, idx).to(self.device)
                for agent, start, width, shape in block.columns:
                    out[agent] = _view(rows, start, width, shape)
        return {
            name: {a: batch[name][a] for a in self.agents if a in batch[name]}
            for name in self.fields
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


def _view(data: torch.Tensor, start: int, width: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Columns ``start : start + width`` of ``data`` as a ``(rows, *shape)`` view."""
    if not shape:
        return data[:, start]
    columns = data[:, start : start + width]
    return columns if len(shape) == 1 else columns.unflatten(1, shape)
