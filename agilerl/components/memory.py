"""Replay-buffer storage layouts and the memory check made before allocating them.

A *layout* describes how one transition is stored: a leaf is a
``(shape, numpy dtype)`` pair (shape without the leading buffer dimension) and
a composite value (``Dict``/``Tuple`` observations, per-agent dicts) is a dict
of layouts. Buffers allocate one array of ``(max_size, *shape)`` per leaf.

Nothing here needs torch, so the byte estimate can run before any allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

import numpy as np
from gymnasium import spaces

Leaf = tuple[tuple[int, ...], np.dtype]
Layout = Union[Leaf, dict[str, "Layout"]]  # noqa: UP007  (recursive alias needs a string)

TRANSITION_FIELDS = ("obs", "action", "reward", "next_obs", "done", "truncated")
"""Fields every replay buffer stores; ``done`` is *terminated* (truncation is not done)."""

SCALAR_DTYPES: dict[str, np.dtype] = {
    "reward": np.dtype(np.float32),
    "done": np.dtype(np.bool_),
    "truncated": np.dtype(np.bool_),
    "n_steps": np.dtype(np.int32),
}
"""Fixed storage dtypes of the per-transition scalar fields."""


class InsufficientMemoryError(MemoryError):
    """A buffer would need more memory than the machine has available."""


def available_memory_bytes() -> int | None:
    """Memory available to new allocations, or ``None`` when it cannot be read.

    Reads ``MemAvailable`` from ``/proc/meminfo`` and falls back to
    ``psutil.virtual_memory().available`` when psutil is installed.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # type: ignore[import-not-found]
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _human(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def check_memory(
    required_bytes: int, *, what: str = "replay buffer", available: int | None = None
) -> None:
    """Refuse an allocation larger than the available memory.

    Args:
        required_bytes: Bytes the allocation needs.
        what: What is being allocated (used in the message).
        available: Available bytes; read with :func:`available_memory_bytes`
            when ``None``. When it cannot be determined the check passes.

    Raises:
        InsufficientMemoryError: If ``required_bytes`` exceeds the available memory.
    """
    if available is None:
        available = available_memory_bytes()
    if available is None or required_bytes <= available:
        return
    raise InsufficientMemoryError(
        f"{what} needs {required_bytes:,} bytes ({_human(required_bytes)}) but only "
        f"{available:,} bytes ({_human(available)}) of memory are available; "
        "lower max_size (memory_size) or use smaller observations"
    )


def storage_dtype(dtype: Any, float_dtype: Any = np.float32) -> np.dtype:
    """Dtype used to store data of ``dtype``: floats become ``float_dtype``, the rest is kept.

    Raises:
        TypeError: For dtypes that cannot be stored in a numeric array.
    """
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.dtype(float_dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        return dtype
    raise TypeError(f"cannot store data of dtype {dtype} in a replay buffer")


def space_layout(space: Any, float_dtype: Any = np.float32) -> Layout:
    """Storage layout of one element of ``space``.

    ``Box`` keeps its dtype unless it is floating (then ``float_dtype``), so
    ``uint8`` images stay ``uint8``; ``Discrete``/``MultiDiscrete`` are
    ``int64``; ``MultiBinary`` is ``int8``. ``Dict``/``Tuple`` spaces and plain
    mappings of spaces (one per agent) become dicts (Tuple keys ``"0"``, ``"1"``...).

    Raises:
        ValueError: For unsupported spaces.
    """
    if isinstance(space, spaces.Box):
        return tuple(int(s) for s in space.shape), storage_dtype(space.dtype, float_dtype)
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(int(s) for s in space.nvec.shape), np.dtype(np.int64)
    if isinstance(space, spaces.MultiBinary):
        return tuple(int(s) for s in space.shape), np.dtype(np.int8)
    if isinstance(space, spaces.Dict):
        return {str(k): space_layout(sub, float_dtype) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return {str(i): space_layout(sub, float_dtype) for i, sub in enumerate(space.spaces)}
    if isinstance(space, Mapping):
        return {str(k): space_layout(sub, float_dtype) for k, sub in space.items()}
    raise ValueError(f"unsupported space for a replay buffer: {type(space).__name__}")


def transition_layout(
    observation_space: Any,
    action_space: Any,
    float_dtype: Any = np.float32,
    *,
    n_step: bool = False,
) -> dict[str, Layout]:
    """Layout of one stored transition.

    Args:
        observation_space: Single-env observation space, or a mapping of agent
            id to space (multi-agent: reward/done/truncated are then per agent).
        action_space: Single-env action space (mapping for multi-agent).
        float_dtype: Storage dtype of floating observations and actions.
        n_step: Add the ``n_steps`` field of n-step buffers.

    Returns:
        ``{"obs", "action", "reward", "next_obs", "done", "truncated"[, "n_steps"]}``.
    """
    obs = space_layout(observation_space, float_dtype)
    layout: dict[str, Layout] = {"obs": obs, "action": space_layout(action_space, float_dtype)}
    names = ["reward", "done", "truncated"] + (["n_steps"] if n_step else [])
    multi_agent = isinstance(observation_space, Mapping) and not isinstance(
        observation_space, spaces.Space
    )
    for name in names:
        leaf: Leaf = ((), SCALAR_DTYPES[name])
        layout[name] = {str(agent): leaf for agent in observation_space} if multi_agent else leaf
    layout["next_obs"] = obs
    return {name: layout[name] for name in (*TRANSITION_FIELDS, *names[3:])}


def layout_leaves(layout: Layout) -> list[Leaf]:
    """All ``(shape, dtype)`` leaves of a layout."""
    if isinstance(layout, dict):
        return [leaf for sub in layout.values() for leaf in layout_leaves(sub)]
    return [layout]


def layout_nbytes(layout: Layout | Mapping[str, Layout]) -> int:
    """Bytes one transition (one row of every leaf) occupies."""
    if isinstance(layout, Mapping):
        return sum(layout_nbytes(sub) for sub in layout.values())
    shape, dtype = layout
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def segment_tree_bytes(max_size: int) -> int:
    """Bytes of the sum and min trees of a prioritized buffer of ``max_size``."""
    capacity = 1 << (int(max_size) - 1).bit_length()
    return 2 * (2 * capacity) * np.dtype(np.float64).itemsize


def estimate_buffer_bytes(
    max_size: int,
    observation_space: Any,
    action_space: Any,
    *,
    dtype: Any = np.float32,
    n_step: bool = False,
    prioritized: bool = False,
) -> int:
    """Bytes a replay buffer of ``max_size`` transitions allocates.

    Counts every field (``obs`` and ``next_obs`` are stored separately), plus
    the segment trees of a prioritized buffer.

    Args:
        max_size: Capacity in transitions.
        observation_space: Single-env observation space (or per-agent mapping).
        action_space: Single-env action space (or per-agent mapping).
        dtype: Storage dtype of floating observations/actions (numpy or torch dtype).
        n_step: Count the ``n_steps`` field of an n-step buffer.
        prioritized: Count the sum/min segment trees.

    Returns:
        The number of bytes.
    """
    float_dtype = _numpy_dtype(dtype)
    layout = transition_layout(observation_space, action_space, float_dtype, n_step=n_step)
    total = int(max_size) * layout_nbytes(layout)
    if prioritized:
        total += segment_tree_bytes(max_size)
    return total


def _numpy_dtype(dtype: Any) -> np.dtype:
    """Numpy dtype of a numpy or torch dtype (torch is not imported for numpy input)."""
    if type(dtype).__module__.startswith("torch"):
        import torch

        return torch.empty(0, dtype=dtype).numpy().dtype
    return np.dtype(dtype)
