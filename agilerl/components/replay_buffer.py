"""Off-policy replay buffers: uniform, n-step and prioritized (PER).

Storage
    Every field is one preallocated CPU tensor of shape ``(max_size, *shape)``
    (a dict of such tensors for ``Dict``/``Tuple`` observations or per-agent
    fields); writes and gathers go through numpy views of the same memory.
    Storage is allocated eagerly when both spaces are given, otherwise on the
    first :meth:`ReplayBuffer.add` from the data's shapes and dtypes.
    Floating observations/actions are stored as ``dtype`` (``float32``);
    integer and boolean data keep their dtype, so ``uint8`` images stay ``uint8``.
    Writes are circular: once full, the oldest transitions are overwritten.

Fields
    ``obs``, ``action``, ``reward``, ``next_obs``, ``done``, ``truncated``.
    ``done`` means *terminated*: the episode reached a terminal state and the
    learner must not bootstrap. A time-limit truncation is stored as
    ``done=False, truncated=True`` with ``next_obs`` the true final observation
    (with gymnasium's autoreset, ``info["final_obs"]``, not the reset
    observation), so the learner still bootstraps from it.

Batching
    ``add`` takes a batch with a leading dimension of ``num_envs``. A single
    transition is recognised by a scalar (0-d) ``reward`` (the first reward
    leaf for per-agent dicts); ``is_vectorised`` overrides that inference.

Sampling
    ``sample`` returns ``dict[str, torch.Tensor]`` on ``device``: observations
    and actions in their storage dtype, ``reward`` ``float32 [B]``, ``done`` and
    ``truncated`` ``float32 [B]`` (0/1), n-step buffers add ``n_steps``
    (``int32 [B]``), ``return_idx`` / PER add ``idxs`` (``int64 [B]``) and PER adds
    ``weights`` (``float32 [B]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agilerl.components.memory import (
    SCALAR_DTYPES,
    TRANSITION_FIELDS,
    Layout,
    check_memory,
    layout_nbytes,
    segment_tree_bytes,
    storage_dtype,
    transition_layout,
)
from agilerl.components.segment_tree import MinSegmentTree, SumSegmentTree

Tree = Any
"""A numpy array / tensor, or a (nested) dict of them."""

FLOAT_FLAGS = ("done", "truncated")


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree, path: str = "") -> Tree:
    """Apply ``fn(leaf, *other_leaves)`` to every leaf of ``tree`` (plain dicts recurse).

    Raises:
        KeyError: If the trees' dict keys differ.
    """
    if isinstance(tree, dict):
        for other in rest:
            if not isinstance(other, dict) or other.keys() != tree.keys():
                got = sorted(other) if isinstance(other, dict) else type(other).__name__
                raise KeyError(f"{path or 'value'}: expected keys {sorted(tree)}, got {got}")
        return {
            k: tree_map(fn, v, *(o[k] for o in rest), path=f"{path}.{k}" if path else str(k))
            for k, v in tree.items()
        }
    return fn(tree, *rest)


def _leaves(tree: Tree) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for sub in tree.values() for leaf in _leaves(sub)]
    return [tree]


def _to_numpy(value: Any, composite_tuple: bool = False) -> Tree:
    """Arrays, tensors, scalars, lists -> numpy; dicts (and obs tuples) -> dicts of numpy."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, Mapping):  # any mapping in, plain dicts out
        return {str(k): _to_numpy(v, composite_tuple) for k, v in value.items()}
    if composite_tuple and isinstance(value, tuple):
        return {str(i): _to_numpy(v, composite_tuple) for i, v in enumerate(value)}
    return np.asarray(value)


def _index_array(idxs: Any) -> np.ndarray:
    if isinstance(idxs, torch.Tensor):
        idxs = idxs.detach().cpu().numpy()
    return np.asarray(idxs, dtype=np.int64).reshape(-1)


def _fit(array: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``array`` reshaped to ``shape`` when only singleton dims differ, else an error."""
    if array.shape == shape:
        return array
    if [d for d in array.shape if d != 1] == [d for d in shape if d != 1]:
        return array.reshape(shape)
    raise ValueError(f"{name}: got shape {array.shape}, expected {shape}")


def _layout_of(storage: Tree) -> Layout:
    return tree_map(lambda t: (tuple(t.shape[1:]), t.numpy().dtype), storage)


class ReplayBuffer:
    """Circular uniform replay buffer over preallocated per-field tensors.

    Args:
        max_size: Capacity in transitions.
        device: Device of sampled batches (storage stays on the CPU).
        dtype: Storage dtype of floating observations and actions.
        observation_space: Single-env observation space; with ``action_space``
            the storage is allocated (and the memory checked) at construction.
        action_space: Single-env action space.
        seed: Seed of the buffer's sampling generator.
        check_memory: Refuse to allocate more than the available memory
            (:class:`~agilerl.components.memory.InsufficientMemoryError`).

    Attributes:
        counter: Transitions added since construction / :meth:`clear`.
        rng: The numpy generator used for sampling.
    """

    def __init__(
        self,
        max_size: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        seed: int | None = None,
        check_memory: bool = True,
    ) -> None:
        if int(max_size) < 1:
            raise ValueError(f"max_size must be >= 1 (got {max_size})")
        if (observation_space is None) != (action_space is None):
            raise ValueError("give both observation_space and action_space, or neither")
        self.max_size = int(max_size)
        self.device = torch.device(device)
        self.dtype = dtype
        self._float_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        self.observation_space = observation_space
        self.action_space = action_space
        self.check_memory = check_memory
        self.rng = np.random.default_rng(seed)
        self.counter = 0
        self._storage: dict[str, Tree] | None = None
        self._np: dict[str, Tree] | None = None
        if observation_space is not None:
            self._allocate(self._space_layout())

    # ------------------------------------------------------------------ sizes
    @property
    def size(self) -> int:
        """Transitions currently stored."""
        return min(self.counter, self.max_size)

    def __len__(self) -> int:
        return self.size

    @property
    def pos(self) -> int:
        """Storage row the next transition is written to."""
        return self.counter % self.max_size

    @property
    def allocated(self) -> bool:
        """Whether the storage tensors exist."""
        return self._storage is not None

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the buffer (storage tensors plus auxiliary arrays)."""
        if self._storage is None:
            return self._extra_nbytes()
        return sum(t.nbytes for t in _leaves(self._storage)) + self._extra_nbytes()

    @property
    def fields(self) -> dict[str, Tree] | None:
        """The storage tensors (``None`` before allocation); row ``i`` is transition ``i``."""
        return self._storage

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_size={self.max_size}, size={self.size})"

    # ------------------------------------------------------------- allocation
    def _space_layout(self) -> dict[str, Layout]:
        return transition_layout(self.observation_space, self.action_space, self._float_dtype)

    def _data_layout(self, batch: dict[str, Tree]) -> dict[str, Layout]:
        """Layout inferred from a batch (leading dim = batch)."""
        layout: dict[str, Layout] = {}
        for name, value in batch.items():
            if name in SCALAR_DTYPES:
                fixed = SCALAR_DTYPES[name]
                layout[name] = tree_map(lambda a, f=fixed: (tuple(a.shape[1:]), f), value)
            else:
                layout[name] = tree_map(
                    lambda a: (tuple(a.shape[1:]), storage_dtype(a.dtype, self._float_dtype)),
                    value,
                    path=name,
                )
        return layout

    def _extra_alloc_bytes(self) -> int:
        """Bytes allocated next to the field storage (segment trees...)."""
        return 0

    def _extra_nbytes(self) -> int:
        return 0

    def _on_allocate(self) -> None:
        """Hook run after the storage is allocated."""

    def _allocate(self, layout: dict[str, Layout]) -> None:
        required = self.max_size * layout_nbytes(layout) + self._extra_alloc_bytes()
        if self.check_memory:
            check_memory(required, what=f"{type(self).__name__}(max_size={self.max_size:,})")

        def alloc(leaf: tuple[tuple[int, ...], np.dtype]) -> torch.Tensor:
            shape, dtype = leaf
            return torch.from_numpy(np.zeros((self.max_size, *shape), dtype=dtype))

        self._storage = {name: tree_map(alloc, sub) for name, sub in layout.items()}
        self._np = {name: tree_map(lambda t: t.numpy(), sub) for name, sub in self._storage.items()}
        self._on_allocate()

    # ---------------------------------------------------------------- writing
    def _prepare(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        done: Any,
        truncated: Any,
        is_vectorised: bool | None,
    ) -> tuple[dict[str, Tree], int]:
        """Convert a transition (batch) to numpy with a leading batch dim."""
        batch = {
            "obs": _to_numpy(obs, composite_tuple=True),
            "action": _to_numpy(action),
            "reward": _to_numpy(reward),
            "next_obs": _to_numpy(next_obs, composite_tuple=True),
            "done": _to_numpy(done),
        }
        if truncated is None:
            batch["truncated"] = tree_map(lambda d: np.zeros(d.shape, np.bool_), batch["done"])
        else:
            batch["truncated"] = _to_numpy(truncated)
        first_reward = _leaves(batch["reward"])[0]
        if is_vectorised is None:
            is_vectorised = first_reward.ndim > 0
        if not is_vectorised:
            batch = {k: tree_map(lambda a: a[None], v) for k, v in batch.items()}
            return batch, 1
        n = int(first_reward.shape[0])
        for name, value in batch.items():
            for leaf in _leaves(value):
                if leaf.ndim == 0 or leaf.shape[0] != n:
                    raise ValueError(
                        f"{name}: leading dimension {leaf.shape[:1]} does not match the "
                        f"batch size {n} given by reward"
                    )
        return batch, n

    def add(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        done: Any,
        truncated: Any = None,
        is_vectorised: bool | None = None,
    ) -> None:
        """Store a batch of transitions (one per vector env).

        Args:
            obs: Observations the actions were taken in, ``[N, ...]`` (dict for
                ``Dict`` observations).
            action: Actions taken, ``[N, ...]``.
            reward: Rewards, ``[N]`` (a scalar means a single transition).
            next_obs: True successor observations (the final observation on an
                episode end, not the reset one).
            done: Terminated flags, ``[N]``; truncation is **not** done.
            truncated: Truncated flags, ``[N]`` (default all false).
            is_vectorised: Whether the inputs carry a leading env dimension;
                ``None`` infers it from ``reward`` (0-d ⇒ single transition).
        """
        batch, n = self._prepare(obs, action, reward, next_obs, done, truncated, is_vectorised)
        self._write(batch, n)

    def _write(self, batch: dict[str, Tree], n: int) -> np.ndarray:
        """Write ``n`` transitions circularly; returns the storage rows used."""
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if self._np is None:
            self._allocate(self._data_layout(batch))
        assert self._np is not None
        if set(batch) != set(self._np):
            raise KeyError(f"fields {sorted(batch)} do not match the buffer's {sorted(self._np)}")
        if n > self.max_size:  # only the newest max_size survive
            batch = {k: tree_map(lambda a: a[-self.max_size :], v) for k, v in batch.items()}
            self.counter += n - self.max_size
            n = self.max_size
        start = self.pos
        if start + n <= self.max_size:
            rows: slice | np.ndarray = slice(start, start + n)
            idxs = np.arange(start, start + n, dtype=np.int64)
        else:
            idxs = (start + np.arange(n, dtype=np.int64)) % self.max_size
            rows = idxs

        for name, value in batch.items():

            def assign(dst: np.ndarray, src: np.ndarray, name: str = name) -> None:
                dst[rows] = _fit(src, (n, *dst.shape[1:]), name)

            tree_map(assign, self._np[name], value, path=name)
        self.counter += n
        return idxs

    # --------------------------------------------------------------- sampling
    def _gather(self, idxs: np.ndarray) -> dict[str, Any]:
        assert self._np is not None
        out: dict[str, Any] = {}
        for name, value in self._np.items():
            flag = name in FLOAT_FLAGS
            if isinstance(value, np.ndarray):  # the common case, without tree_map's calls
                out[name] = self._rows(value, idxs, flag)
            else:
                out[name] = tree_map(lambda a, flag=flag: self._rows(a, idxs, flag), value)
        return out

    def _rows(self, array: np.ndarray, idxs: np.ndarray, flag: bool) -> torch.Tensor:
        """Rows ``idxs`` of one stored array as a tensor on the device (flags as float32)."""
        rows = torch.from_numpy(array.take(idxs, axis=0))
        if flag:
            rows = rows.float()
        return rows if self.device.type == "cpu" else rows.to(self.device)

    def _check_nonempty(self) -> None:
        if self.size == 0:
            raise ValueError(f"cannot sample from an empty {type(self).__name__}")

    def sample(self, batch_size: int, return_idx: bool = False) -> dict[str, Any]:
        """Sample ``batch_size`` stored transitions uniformly (with replacement).

        Args:
            batch_size: Transitions to sample.
            return_idx: Also return the storage rows as ``idxs``.

        Returns:
            ``{"obs", "action", "reward", "next_obs", "done", "truncated"[, "idxs"]}``
            tensors on ``device`` (see the module docstring for dtypes).

        Raises:
            ValueError: If the buffer is empty.
        """
        self._check_nonempty()
        idxs = self.rng.integers(0, self.size, size=int(batch_size), dtype=np.int64)
        batch = self._gather(idxs)
        if return_idx:
            batch["idxs"] = torch.from_numpy(idxs).to(self.device)
        return batch

    def sample_from_indices(self, idxs: Any) -> dict[str, Any]:
        """The transitions stored at rows ``idxs`` (same format as :meth:`sample`).

        Args:
            idxs: Storage rows (array, list or tensor), each in ``[0, size)``.

        Raises:
            IndexError: If an index is outside the stored range.
        """
        idxs = _index_array(idxs)
        if idxs.size and (idxs.min() < 0 or idxs.max() >= self.size):
            raise IndexError(
                f"indices must lie in [0, {self.size}) (got {idxs.min()}..{idxs.max()})"
            )
        return self._gather(idxs)

    # ----------------------------------------------------------------- state
    def clear(self) -> None:
        """Forget all transitions (the storage stays allocated)."""
        self.counter = 0

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and ints: loads with ``torch.load(weights_only=True)``.

        Only the filled rows are copied (a full buffer's storage is referenced).
        """
        state: dict[str, Any] = {
            "max_size": self.max_size,
            "counter": self.counter,
            "rng": json.dumps(self.rng.bit_generator.state),  # a resumed run samples alike
        }
        if self._storage is not None:
            n = self.size
            state["fields"] = {
                name: tree_map(lambda t: t if n == self.max_size else t[:n].clone(), sub)
                for name, sub in self._storage.items()
            }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the capacity must match).

        Raises:
            ValueError: If ``max_size`` differs.
        """
        if int(state["max_size"]) != self.max_size:
            raise ValueError(f"state has max_size {state['max_size']}, this buffer {self.max_size}")
        fields = state.get("fields")
        self.counter = 0
        if fields is None:
            self._storage = self._np = None
        else:
            layout = {name: _layout_of(sub) for name, sub in fields.items()}
            if self._np is None or _layout_of_np(self._np) != layout:
                self._allocate(layout)
            assert self._np is not None
            for name, sub in fields.items():

                def copy(dst: np.ndarray, src: torch.Tensor) -> None:
                    dst[: src.shape[0]] = src.numpy()

                tree_map(copy, self._np[name], sub, path=name)
        self.counter = int(state["counter"])
        if "rng" in state:  # older checkpoints lack it: sampling restarts from the seed
            self.rng.bit_generator.state = json.loads(state["rng"])


def sample_members(memories: Sequence[ReplayBuffer], batch_size: int) -> dict[str, Any] | None:
    """One :meth:`ReplayBuffer.sample` from each memory, as one member-major batch.

    Memory ``i`` draws its rows from its own generator, exactly as its
    ``sample(batch_size)`` would; the fields are gathered from all memories in
    one pass and returned as ``len(memories) * batch_size`` rows (memory 0's
    first). Returns ``None`` where that does not apply (another buffer class,
    nested fields, different field sets or a non-CPU device): sample each then.

    Raises:
        ValueError: If a memory is empty.
    """
    if not memories or any(type(m) is not ReplayBuffer for m in memories):
        return None
    first = memories[0]._np
    if first is None or any(not isinstance(v, np.ndarray) for v in first.values()):
        return None
    for memory in memories:
        if memory.device.type != "cpu" or memory._np is None or memory._np.keys() != first.keys():
            return None
    idxs = []
    for memory in memories:
        memory._check_nonempty()
        idxs.append(memory.rng.integers(0, memory.size, size=int(batch_size), dtype=np.int64))
    out: dict[str, Any] = {}
    for name in first:
        rows = torch.from_numpy(
            np.concatenate(
                [m._np[name].take(i, axis=0) for m, i in zip(memories, idxs, strict=True)]
            )
        )
        out[name] = rows.float() if name in FLOAT_FLAGS else rows
    return out


def _layout_of_np(arrays: dict[str, Tree]) -> dict[str, Layout]:
    return {
        name: tree_map(lambda a: (tuple(a.shape[1:]), a.dtype), sub) for name, sub in arrays.items()
    }


class MultiStepReplayBuffer(ReplayBuffer):
    """Replay buffer of n-step transitions computed across vectorised envs.

    Each env keeps a window of its last (at most ``n_step``) one-step
    transitions. After every :meth:`add`:

    * a window holding ``n_step`` transitions of an unfinished episode emits
      one n-step transition starting at its oldest step, which then leaves
      the window;
    * a window whose newest step ended the episode (terminated or truncated)
      is flushed: every step left in it emits a transition cut at the episode
      end.

    So every one-step transition is stored exactly once (steps of episodes
    still running wait in their window). The stored transition starting at
    step ``t`` is ``(obs_t, a_t, R, next_obs_{t+k-1}, done_{t+k-1},
    truncated_{t+k-1}, n_steps=k)`` with ``R = sum_{j<k} gamma**j r_{t+j}`` and
    ``k = n_step`` unless the episode ended earlier. ``done`` is 1 only when
    the episode terminated within those ``k`` steps; after a truncation
    ``next_obs`` is the final observation and ``done`` 0, so the learner
    bootstraps: ``target = R + gamma**n_steps * (1 - done) * Q(next_obs)``.

    Combined PER + n-step (Rainbow): :meth:`add` returns the one-step
    transitions of exactly the n-step transitions it stored, in the same
    order. Feeding them, and nothing else, to a main buffer with the same
    ``max_size`` (``per.add(**one_step)`` when not ``None``) keeps both
    buffers' counters equal, so storage row ``i`` of the main buffer and row
    ``i`` here start at the same step. Sample the main buffer, then read the
    matching n-step transitions with ``sample_from_indices(batch["idxs"])``.

    Args:
        max_size: Capacity in transitions.
        n_step: Steps folded into one return.
        gamma: Discount factor.
        num_envs: Vector envs per :meth:`add` (inferred from the first add when ``None``).
        device: Device of sampled batches.
        dtype: Storage dtype of floating observations and actions.
        observation_space: See :class:`ReplayBuffer`.
        action_space: See :class:`ReplayBuffer`.
        seed: Seed of the sampling generator.
        check_memory: See :class:`ReplayBuffer`.
    """

    def __init__(
        self,
        max_size: int,
        n_step: int = 3,
        gamma: float = 0.99,
        num_envs: int | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        seed: int | None = None,
        check_memory: bool = True,
    ) -> None:
        if int(n_step) < 1:
            raise ValueError(f"n_step must be >= 1 (got {n_step})")
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1] (got {gamma})")
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.num_envs = None if num_envs is None else int(num_envs)
        self._window: dict[str, Tree] | None = None
        self._win_head: np.ndarray | None = None
        self._win_len: np.ndarray | None = None
        super().__init__(
            max_size,
            device,
            dtype,
            observation_space=observation_space,
            action_space=action_space,
            seed=seed,
            check_memory=check_memory,
        )

    def _space_layout(self) -> dict[str, Layout]:
        return transition_layout(
            self.observation_space, self.action_space, self._float_dtype, n_step=True
        )

    def _extra_nbytes(self) -> int:
        if self._window is None:
            return 0
        return sum(a.nbytes for a in _leaves(self._window))

    def _init_windows(self, step: dict[str, Tree], num_envs: int) -> None:
        if self.num_envs is not None and num_envs != self.num_envs:
            raise ValueError(f"expected {self.num_envs} envs per add, got {num_envs}")
        self.num_envs = num_envs
        layout = _layout_of_np(self._np) if self._np is not None else self._data_layout(step)
        self._window = {
            name: tree_map(
                lambda leaf: np.zeros((num_envs, self.n_step, *leaf[0]), dtype=leaf[1]),
                layout[name],
            )
            for name in TRANSITION_FIELDS
        }
        self._win_head = np.zeros(num_envs, dtype=np.int64)
        self._win_len = np.zeros(num_envs, dtype=np.int64)

    def add(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        done: Any,
        truncated: Any = None,
        is_vectorised: bool | None = None,
    ) -> dict[str, Tree] | None:
        """Add one step of every env; store the n-step transitions that became complete.

        Args:
            obs: Observations, ``[num_envs, ...]``.
            action: Actions, ``[num_envs, ...]``.
            reward: One-step rewards, ``[num_envs]``.
            next_obs: True successor observations (final observation on episode end).
            done: Terminated flags (truncation is not done).
            truncated: Truncated flags; needed to cut windows at time limits.
            is_vectorised: See :meth:`ReplayBuffer.add`.

        Returns:
            ``None`` when nothing was stored, else the one-step transitions
            matching the stored n-step transitions, in storage order, as a dict
            of numpy arrays with keys ``obs, action, reward, next_obs, done,
            truncated`` (pass it to ``main_buffer.add(**one_step)``).
        """
        step, num_envs = self._prepare(
            obs, action, reward, next_obs, done, truncated, is_vectorised
        )
        if isinstance(step["reward"], dict):
            raise TypeError("MultiStepReplayBuffer does not support per-agent (dict) rewards")
        if self._window is None:
            self._init_windows(step, num_envs)
        elif num_envs != self.num_envs:
            raise ValueError(f"expected {self.num_envs} envs per add, got {num_envs}")
        window, head, length = self._window, self._win_head, self._win_len
        assert window is not None and head is not None and length is not None
        n, envs = self.n_step, np.arange(num_envs)

        slot = (head + length) % n
        for name in TRANSITION_FIELDS:

            def put(dst: np.ndarray, src: np.ndarray, name: str = name) -> None:
                dst[envs, slot] = _fit(src, (num_envs, *dst.shape[2:]), name)

            tree_map(put, window[name], step[name], path=name)
        length += 1

        ended = window["done"][envs, slot] | window["truncated"][envs, slot]
        full = (length == n) & ~ended
        if not (ended.any() or full.any()):
            return None

        positions = np.arange(n)
        rel = (head[:, None] + positions) % n  # [E, n] slot of the k-th oldest step
        valid = positions[None, :] < length[:, None]
        rewards = np.where(valid, window["reward"][envs[:, None], rel].astype(np.float64), 0.0)
        returns = np.zeros((num_envs, n + 1), dtype=np.float64)
        for k in range(n - 1, -1, -1):  # discounted suffix sums within each window
            returns[:, k] = rewards[:, k] + self.gamma * returns[:, k + 1]

        emit = (ended[:, None] & valid) | (full[:, None] & (positions[None, :] == 0))
        env_idx, start = np.nonzero(emit)  # env-major, oldest step first
        first_slot = rel[env_idx, start]
        last_slot = rel[env_idx, length[env_idx] - 1]

        def at(rows: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
            return lambda a: a[env_idx, rows]

        one_step = {name: tree_map(at(first_slot), window[name]) for name in TRANSITION_FIELDS}
        n_step_batch = {
            "obs": one_step["obs"],
            "action": one_step["action"],
            "reward": returns[env_idx, start].astype(np.float32),
            "next_obs": tree_map(at(last_slot), window["next_obs"]),
            "done": window["done"][env_idx, last_slot],
            "truncated": window["truncated"][env_idx, last_slot],
            "n_steps": (length[env_idx] - start).astype(np.int32),
        }
        self._write(n_step_batch, int(env_idx.size))

        head[full] = (head[full] + 1) % n
        length[full] -= 1
        head[ended] = 0
        length[ended] = 0
        return one_step

    def clear(self) -> None:
        """Forget stored transitions and the steps waiting in the windows."""
        super().clear()
        if self._win_len is not None and self._win_head is not None:
            self._win_len[:] = 0
            self._win_head[:] = 0

    def state_dict(self) -> dict[str, Any]:
        """Like :meth:`ReplayBuffer.state_dict`, plus the per-env windows."""
        state = super().state_dict()
        state["n_step"] = self.n_step
        if self._window is not None:
            state["window"] = {
                name: tree_map(lambda a: torch.from_numpy(a.copy()), sub)
                for name, sub in self._window.items()
            }
            state["window_head"] = torch.from_numpy(self._win_head.copy())
            state["window_len"] = torch.from_numpy(self._win_len.copy())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (``max_size`` and ``n_step`` must match)."""
        if int(state.get("n_step", self.n_step)) != self.n_step:
            raise ValueError(f"state has n_step {state['n_step']}, this buffer {self.n_step}")
        super().load_state_dict(state)
        if "window" in state:
            self._window = {
                name: tree_map(lambda t: t.numpy().copy(), sub)
                for name, sub in state["window"].items()
            }
            self._win_head = state["window_head"].numpy().copy()
            self._win_len = state["window_len"].numpy().copy()
            self.num_envs = int(self._win_len.shape[0])
        else:
            self._window = self._win_head = self._win_len = None


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (PER) over sum/min segment trees.

    Leaf ``i`` of both trees (sized to the next power of two of ``max_size``)
    holds ``p_i ** alpha``. New transitions get ``max_priority ** alpha``, where
    ``max_priority`` is the largest priority passed to
    :meth:`update_priorities` so far (initially 1).

    Args:
        max_size: Capacity in transitions.
        alpha: Priority exponent (0 = uniform).
        device: Device of sampled batches.
        dtype: Storage dtype of floating observations and actions.
        observation_space: See :class:`ReplayBuffer`.
        action_space: See :class:`ReplayBuffer`.
        seed: Seed of the sampling generator.
        check_memory: See :class:`ReplayBuffer`.
    """

    def __init__(
        self,
        max_size: int,
        alpha: float = 0.6,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        seed: int | None = None,
        check_memory: bool = True,
    ) -> None:
        if float(alpha) < 0:
            raise ValueError(f"alpha must be >= 0 (got {alpha})")
        self.alpha = float(alpha)
        self.max_priority = 1.0
        self.sum_tree: SumSegmentTree | None = None
        self.min_tree: MinSegmentTree | None = None
        super().__init__(
            max_size,
            device,
            dtype,
            observation_space=observation_space,
            action_space=action_space,
            seed=seed,
            check_memory=check_memory,
        )

    def _extra_alloc_bytes(self) -> int:
        return segment_tree_bytes(self.max_size)

    def _extra_nbytes(self) -> int:
        if self.sum_tree is None or self.min_tree is None:
            return 0
        return self.sum_tree.nbytes + self.min_tree.nbytes

    def _on_allocate(self) -> None:
        self.sum_tree = SumSegmentTree(self.max_size)
        self.min_tree = MinSegmentTree(self.max_size)

    def _trees(self) -> tuple[SumSegmentTree, MinSegmentTree]:
        assert self.sum_tree is not None and self.min_tree is not None
        return self.sum_tree, self.min_tree

    def _write(self, batch: dict[str, Tree], n: int) -> np.ndarray:
        idxs = super()._write(batch, n)
        if idxs.size:
            value = self.max_priority**self.alpha
            for tree in self._trees():
                tree.update(idxs, value)
        return idxs

    def sample(self, batch_size: int, beta: float = 0.4) -> dict[str, Any]:  # type: ignore[override]
        """Stratified proportional sample with importance weights.

        The total priority is cut into ``batch_size`` equal segments and one
        uniform point is drawn in each; item ``i`` is chosen with probability
        ``P(i) = p_i**alpha / sum_j p_j**alpha``.

        Args:
            batch_size: Transitions to sample.
            beta: Importance-sampling exponent.

        Returns:
            The :meth:`ReplayBuffer.sample` fields plus ``idxs`` (``int64``) and
            ``weights`` = ``(N P(i))**-beta / max_j (N P(j))**-beta`` (``float32``),
            ``N`` the number of stored transitions.

        Raises:
            ValueError: If the buffer is empty.
        """
        self._check_nonempty()
        sum_tree, min_tree = self._trees()
        batch_size = int(batch_size)
        total = sum_tree.total()
        points = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        np.minimum(points, np.nextafter(total, 0.0), out=points)
        idxs = np.minimum(sum_tree.find_prefixsum_idx(points), self.size - 1)
        # (N P(i))^-beta / (N P_min)^-beta == (p_i / p_min)^-beta
        weights = (sum_tree.tree[sum_tree.capacity + idxs] / min_tree.min()) ** (-float(beta))
        batch = self._gather(idxs)
        batch["idxs"] = torch.from_numpy(idxs).to(self.device)
        batch["weights"] = torch.from_numpy(weights.astype(np.float32)).to(self.device)
        return batch

    def update_priorities(self, idxs: Any, priorities: Any) -> None:
        """Set the priorities of stored transitions.

        Args:
            idxs: Storage rows (``idxs`` from :meth:`sample`).
            priorities: Positive priorities, normally ``|td_error| + eps``; the
                buffer raises them to ``alpha`` and tracks their maximum.

        Raises:
            ValueError: On a length mismatch or a non-positive / non-finite priority.
            IndexError: If an index is outside the stored range.
        """
        idxs = _index_array(idxs)
        if isinstance(priorities, torch.Tensor):
            priorities = priorities.detach().cpu().numpy()
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if priorities.shape != idxs.shape:
            raise ValueError(f"{idxs.size} indices but {priorities.size} priorities")
        if idxs.size == 0:
            return
        if not (np.all(np.isfinite(priorities)) and priorities.min() > 0):
            raise ValueError("priorities must be positive and finite (add a small eps)")
        if idxs.min() < 0 or idxs.max() >= self.size:
            raise IndexError(f"indices must lie in [0, {self.size})")
        values = priorities**self.alpha
        for tree in self._trees():
            tree.update(idxs, values)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def clear(self) -> None:
        """Forget all transitions and priorities."""
        super().clear()
        self.max_priority = 1.0
        if self.sum_tree is not None and self.min_tree is not None:
            self.sum_tree.reset()
            self.min_tree.reset()

    def state_dict(self) -> dict[str, Any]:
        """Like :meth:`ReplayBuffer.state_dict`, plus leaf priorities and ``max_priority``."""
        state = super().state_dict()
        state["max_priority"] = torch.tensor(self.max_priority, dtype=torch.float64)
        if self.sum_tree is not None:
            state["priorities"] = torch.from_numpy(self.sum_tree.leaves[: self.size].copy())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (the capacity must match)."""
        super().load_state_dict(state)
        self.max_priority = float(state["max_priority"])
        if self.sum_tree is not None and self.min_tree is not None:
            priorities = state["priorities"].numpy() if "priorities" in state else []
            self.sum_tree.build(priorities)
            self.min_tree.build(priorities)


BufferType = ReplayBuffer
"""Any replay buffer (all derive from :class:`ReplayBuffer`)."""
