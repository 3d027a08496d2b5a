"""Gymnasium space helpers: (de)serialisation and observation conversion.

Checkpoints must load with ``torch.load(weights_only=True)``, so spaces are
stored as plain dicts of Python scalars, strings and (nested) lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

ObsTensor = torch.Tensor | dict[str, torch.Tensor]

SUPPORTED_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def _array_to_plain(array: np.ndarray) -> float | int | list[Any]:
    """A uniform array becomes one scalar, anything else a nested list."""
    flat = array.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return flat[0].item()
    return array.tolist()


def space_to_dict(space: spaces.Space) -> dict[str, Any]:
    """Serialise a gymnasium space to a dict of plain Python values.

    Args:
        space: A ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``,
            ``Dict`` or ``Tuple`` space (``Dict``/``Tuple`` may nest).

    Returns:
        A dict that :func:`space_from_dict` turns back into an equal space.

    Raises:
        ValueError: If the space type is not supported.
    """
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
            "low": _array_to_plain(space.low),
            "high": _array_to_plain(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
        }
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": list(n) if isinstance(n, tuple | list) else int(n)}
    if isinstance(space, spaces.Dict):
        return {
            "type": "Dict",
            "keys": list(space.spaces.keys()),
            "spaces": [space_to_dict(sub) for sub in space.spaces.values()],
        }
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_dict(sub) for sub in space.spaces]}
    raise ValueError(
        f"Cannot serialise space of type {type(space).__name__}; "
        f"supported: {', '.join(SUPPORTED_SPACES)}"
    )


def space_from_dict(data: dict[str, Any]) -> spaces.Space:
    """Rebuild a gymnasium space written by :func:`space_to_dict`.

    Args:
        data: The serialised space.

    Returns:
        The gymnasium space.

    Raises:
        ValueError: If ``data`` does not describe a supported space.
    """
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        shape = tuple(data["shape"])
        low = np.broadcast_to(np.asarray(data["low"], dtype=dtype), shape)
        high = np.broadcast_to(np.asarray(data["high"], dtype=dtype), shape)
        return spaces.Box(low=low.copy(), high=high.copy(), shape=shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(
            np.asarray(data["nvec"], dtype=np.int64),
            start=np.asarray(data.get("start", 0), dtype=np.int64),
        )
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict(
            {
                key: space_from_dict(sub)
                for key, sub in zip(data["keys"], data["spaces"], strict=True)
            }
        )
    if kind == "Tuple":
        return spaces.Tuple([space_from_dict(sub) for sub in data["spaces"]])
    raise ValueError(f"Not a serialised space (type={kind!r}); supported: {SUPPORTED_SPACES}")


def is_image_space(space: spaces.Space) -> bool:
    """True for a 3-D ``Box`` (an image, channels first or last)."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def flat_input_dim(space: spaces.Space) -> int:
    """Width of the float vector an MLP sees for ``space`` (one-hot for discrete)."""
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    raise ValueError(f"Space {type(space).__name__} cannot be flattened for an MLP encoder")


_NUMPY_DTYPES = {torch.int64: np.int64, torch.uint8: np.uint8, torch.float32: np.float32}


def storage_dtype(space: spaces.Space) -> torch.dtype:
    """Torch dtype used to store observations of a non-composite space."""
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        return torch.int64
    if isinstance(space, spaces.Box) and space.dtype == np.uint8:
        return torch.uint8
    return torch.float32


def _leaf_converter(space: spaces.Space, device: torch.device) -> Callable[[Any], torch.Tensor]:
    dtype = storage_dtype(space)
    np_dtype = np.dtype(_NUMPY_DTYPES[dtype])
    batched_ndim = len(space.shape or ()) + 1
    on_cpu = device.type == "cpu"

    def convert(obs: Any) -> torch.Tensor:
        if type(obs) is np.ndarray and obs.dtype == np_dtype and obs.ndim == batched_ndim:
            tensor = torch.from_numpy(obs)  # zero-copy fast path
        elif isinstance(obs, torch.Tensor):
            tensor = obs.to(dtype=dtype)
            if tensor.ndim < batched_ndim:
                tensor = tensor.unsqueeze(0)
        else:
            array = np.asarray(obs, dtype=np_dtype)
            if array.ndim < batched_ndim:
                array = array[None]
            tensor = torch.from_numpy(np.ascontiguousarray(array))
        return tensor if on_cpu and tensor.device.type == "cpu" else tensor.to(device)

    return convert


def make_obs_converter(
    space: spaces.Space, device: torch.device | str = "cpu"
) -> Callable[[Any], ObsTensor]:
    """Build a function turning observation batches of ``space`` into tensors.

    Numpy arrays that already have the storage dtype are wrapped zero-copy.
    Unbatched observations get a leading batch dimension. ``Tuple``
    observations become dicts keyed ``"0"``, ``"1"``, ...

    Args:
        space: The single-env observation space.
        device: Target device.

    Returns:
        ``convert(obs) -> Tensor | dict[str, Tensor]``.
    """
    device = torch.device(device)
    if isinstance(space, spaces.Dict | spaces.Tuple):
        items = composite_items(space)
        converters = [(key, _leaf_converter(sub, device)) for key, sub in items]
        is_tuple = isinstance(space, spaces.Tuple)

        def convert_composite(obs: Any) -> dict[str, torch.Tensor]:
            if is_tuple and not isinstance(obs, dict):
                return {key: conv(obs[int(key)]) for key, conv in converters}
            return {key: conv(obs[key]) for key, conv in converters}

        return convert_composite
    return _leaf_converter(space, device)


def obs_to_tensor(space: spaces.Space, obs: Any, device: torch.device | str = "cpu") -> ObsTensor:
    """Convert one observation batch to tensors (see :func:`make_obs_converter`)."""
    return make_obs_converter(space, device)(obs)


def composite_items(space: spaces.Space) -> list[tuple[str, spaces.Space]]:
    """``(key, subspace)`` pairs of a ``Dict`` or ``Tuple`` space (Tuple keys are "0", "1", ...)."""
    if isinstance(space, spaces.Dict):
        return list(space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return [(str(i), sub) for i, sub in enumerate(space.spaces)]
    raise ValueError(f"{type(space).__name__} is not a Dict or Tuple space")


def stack_observations(space: spaces.Space, items: list[Any]) -> Any:
    """Stack a list of single-env observations (as in ``info["final_obs"]``) into a batch."""
    if isinstance(space, spaces.Dict):
        return {key: np.stack([item[key] for item in items]) for key in space.spaces}
    if isinstance(space, spaces.Tuple):
        return tuple(np.stack([item[i] for item in items]) for i in range(len(space.spaces)))
    return np.stack(items)


def same_space(a: Any, b: Any) -> bool:
    """Whether two spaces have the same kind, shape, sizes and (for dicts) keys."""
    if type(a) is not type(b) or getattr(a, "shape", None) != getattr(b, "shape", None):
        return False
    if hasattr(a, "n") and np.any(np.asarray(a.n) != np.asarray(b.n)):
        return False
    if isinstance(getattr(a, "spaces", None), dict):
        return a.spaces.keys() == b.spaces.keys() and all(
            same_space(a.spaces[k], b.spaces[k]) for k in a.spaces
        )
    return True
