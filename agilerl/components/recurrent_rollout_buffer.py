"""Rollout storage for recurrent policies: per-step recurrent states and BPTT sequences.

A :class:`RecurrentRolloutBuffer` is a :class:`~agilerl.components.rollout_buffer.RolloutBuffer`
that also stores, for every step, the recurrent state the policy read at that
step (``[T, N, *state_shape]``), and carries the state reached at the end of a
rollout into the next one (:attr:`RecurrentRolloutBuffer.rollout_state`).

For truncated back-propagation through time the stored steps are cut into
sequences of at most ``max_seq_len`` steps. A sequence never crosses an episode
boundary (so the LSTM runs each one in a single call, without resets inside)
and starts from the stored state of its first step (zero at an episode start).
The ``bptt_sequence_type`` says where sequences start within each episode piece
of the rollout:

* ``chunked``: every ``max_seq_len`` steps: non-overlapping sequences, each
  step in exactly one;
* ``fifty_percent_overlap``: every ``max_seq_len // 2`` steps, so consecutive
  sequences share half their steps;
* ``maximum``: at every step (a sliding window of stride 1): each step is seen
  in up to ``max_seq_len`` sequences, with every length of history before it.

Steps that appear in several sequences count once per sequence in the loss.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from agilerl.components.rollout_buffer import Batch, RolloutBuffer, _as_numpy

__all__ = ["BPTT_SEQUENCE_TYPES", "RecurrentRolloutBuffer", "sequence_stride"]

BPTT_SEQUENCE_TYPES = ("chunked", "fifty_percent_overlap", "maximum")
_FLAT_FIELDS = ("actions", "log_probs", "values", "advantages", "returns")


def sequence_stride(bptt_sequence_type: str, max_seq_len: int) -> int:
    """Steps between the starts of consecutive sequences of one episode piece.

    Raises:
        ValueError: For an unknown ``bptt_sequence_type``.
    """
    if bptt_sequence_type == "chunked":
        return max_seq_len
    if bptt_sequence_type == "fifty_percent_overlap":
        return max(1, max_seq_len // 2)
    if bptt_sequence_type == "maximum":
        return 1
    raise ValueError(
        f"Unknown bptt_sequence_type {bptt_sequence_type!r}; choose one of "
        f"{', '.join(BPTT_SEQUENCE_TYPES)}"
    )


class RecurrentRolloutBuffer(RolloutBuffer):
    """A rollout buffer that also stores recurrent states and yields BPTT sequences.

    Args:
        capacity_per_env: Steps stored per env (``T``).
        num_envs: Number of parallel envs (``N``).
        observation_space: Single-env observation space (a ``Dict`` is stored per key).
        action_space: Single-env action space.
        state_shape: Shape of one env's recurrent state.
        device: Device the minibatches are returned on.
        gamma: Discount factor.
        gae_lambda: GAE lambda.

    Attributes:
        rollout_state: The state each env's policy holds now ``[N, *state_shape]``:
            zero at first, then where the last collection left it.
    """

    def __init__(
        self,
        capacity_per_env: int,
        num_envs: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        state_shape: tuple[int, ...],
        device: str | torch.device = "cpu",
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
    ) -> None:
        super().__init__(
            capacity_per_env,
            num_envs,
            observation_space,
            action_space,
            device=device,
            gamma=gamma,
            gae_lambda=gae_lambda,
        )
        self.state_shape = tuple(int(s) for s in state_shape)
        self.states = torch.zeros((self.capacity_per_env, self.num_envs, *self.state_shape))
        self._np_states = self.states.numpy()
        self.rollout_state = torch.zeros((self.num_envs, *self.state_shape))
        self._sequence_cache: tuple[Any, ...] | None = None

    def reset(self) -> None:
        """Forget stored steps (episode trackers and :attr:`rollout_state` are kept)."""
        super().reset()
        self._sequence_cache = None

    def add(self, *args: Any, state: Any = None, **kwargs: Any) -> None:
        """Store one vector step (see :meth:`RolloutBuffer.add`) and the state it was acted from.

        Args:
            *args: As :meth:`RolloutBuffer.add`.
            state: Recurrent states the policy read at this step ``[N, *state_shape]``.
            **kwargs: As :meth:`RolloutBuffer.add`.

        Raises:
            ValueError: If ``state`` is missing.
        """
        if state is None:
            raise ValueError("RecurrentRolloutBuffer.add needs the policy's state=")
        t = self.pos
        super().add(*args, **kwargs)
        self._np_states[t] = _as_numpy(state)
        self._sequence_cache = None

    # --- sequences ----------------------------------------------------------------------
    def sequence_windows(self, max_seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
        """``(env, start, length)`` rows of every sequence, and their step count.

        Returns:
            An ``[M, 3]`` int array and the total number of steps over all sequences.
        """
        T = self.pos
        done = self._np_terminated[:T] | self._np_truncated[:T]
        rows: list[tuple[int, int, int]] = []
        for env in range(self.num_envs):
            cuts = [0, *(np.flatnonzero(done[:-1, env]) + 1).tolist(), T]
            for begin, end in itertools.pairwise(cuts):
                for start in range(begin, end, stride):
                    rows.append((env, start, min(max_seq_len, end - start)))
        windows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
        return windows, int(windows[:, 2].sum())

    def _sequence_index(self, max_seq_len: int, stride: int) -> tuple[Any, ...]:
        key = (max_seq_len, stride)
        if self._sequence_cache is None or self._sequence_cache[0] != key:
            windows, total = self.sequence_windows(max_seq_len, stride)
            self._sequence_cache = (key, windows, total)
        return self._sequence_cache

    def num_sequence_minibatches(self, batch_size: int, max_seq_len: int, stride: int) -> int:
        """Minibatches per epoch: about ``batch_size`` sequence steps each."""
        _, _, total = self._sequence_index(max_seq_len, stride)
        return max(1, math.ceil(total / batch_size))

    def get_sequence_minibatches(
        self,
        batch_size: int,
        max_seq_len: int,
        bptt_sequence_type: str = "chunked",
        generator: torch.Generator | None = None,
    ) -> Iterator[Batch]:
        """Yield one epoch of sequence minibatches of about ``batch_size`` steps each.

        Each batch holds ``observations`` ``[L, B, ...]`` (time-major, padded to
        the longest of its ``B`` sequences), ``states`` ``[B, *state_shape]``
        (the state before each sequence's first step), ``mask`` ``[L, B]`` (real
        steps), and ``actions``, ``log_probs``, ``values``, ``advantages`` and
        ``returns`` of the real steps, in the order of ``mask``'s true entries
        (row-major: step, then sequence).

        Raises:
            RuntimeError: If advantages were not computed for the stored steps.
            ValueError: For a bad ``batch_size``, ``max_seq_len`` or sequence type.
        """
        if not self.computed:
            raise RuntimeError("Call compute_returns_and_advantages() before get_minibatches()")
        if batch_size < 1 or max_seq_len < 1:
            raise ValueError(
                f"batch_size and max_seq_len must be >= 1 (got {batch_size}, {max_seq_len})"
            )
        stride = sequence_stride(bptt_sequence_type, max_seq_len)
        _, windows, _ = self._sequence_index(max_seq_len, stride)
        n_batches = self.num_sequence_minibatches(batch_size, max_seq_len, stride)
        where = generator.device if generator is not None else None
        order = torch.randperm(len(windows), generator=generator, device=where).cpu().numpy()
        for chosen in np.array_split(order, n_batches):
            if len(chosen):
                yield self._sequence_batch(windows[chosen])

    def _sequence_batch(self, windows: np.ndarray) -> Batch:
        envs, starts, lengths = windows[:, 0], windows[:, 1], windows[:, 2]
        steps = int(lengths.max())
        offsets = np.arange(steps)[:, None]
        mask = offsets < lengths[None, :]
        # padded positions repeat the sequence's first step; the mask drops them
        t_idx = torch.as_tensor(starts[None, :] + np.where(mask, offsets, 0))
        n_idx = torch.as_tensor(np.broadcast_to(envs[None, :], mask.shape).copy())
        mask_t = torch.as_tensor(mask)
        flat_t, flat_n = t_idx[mask_t], n_idx[mask_t]
        obs = self.observations
        batch: Batch = {
            "observations": (
                {k: v[t_idx, n_idx] for k, v in obs.items()}
                if isinstance(obs, dict)
                else obs[t_idx, n_idx]
            ),
            "states": self.states[torch.as_tensor(starts), torch.as_tensor(envs)],
            "mask": mask_t,
        }
        for name in _FLAT_FIELDS:
            batch[name] = getattr(self, name)[flat_t, flat_n]
        if self.device.type != "cpu":
            batch = {
                k: {n: t.to(self.device) for n, t in v.items()}
                if isinstance(v, dict)
                else v.to(self.device)
                for k, v in batch.items()
            }
        return batch
