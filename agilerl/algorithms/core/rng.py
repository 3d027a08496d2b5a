"""Random generator states as plain data: torch generators (also across devices), numpy ones."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> None:
    """Set ``generator`` to a state saved by ``get_state()``, on this or another device.

    A CPU generator's state (Mersenne Twister, 5,056 bytes) and a CUDA one's (Philox seed
    and offset, 16 bytes) do not convert into each other. A checkpoint written on one and
    resumed on the other reseeds ``generator`` from a hash of the saved state instead:
    deterministic (the same checkpoint always gives the same stream), though not the
    stream the saving device would have drawn, which its arithmetic would not match anyway.
    """
    state = state.to(torch.uint8).cpu()
    if state.numel() == generator.get_state().numel():
        generator.set_state(state)
        return
    digest = hashlib.sha256(state.numpy().tobytes()).digest()
    generator.manual_seed(int.from_bytes(digest[:8], "little") % (2**63))


def generator_state(rng: np.random.Generator) -> str:
    """A numpy generator's state as a JSON string (plain data for ``weights_only`` loads)."""
    return json.dumps(rng.bit_generator.state)


def generator_from_state(state: str | Mapping[str, Any]) -> np.random.Generator:
    """Rebuild a generator from :func:`generator_state` output.

    Raises:
        ValueError: If the state names no numpy bit generator.
    """
    data = json.loads(state) if isinstance(state, str) else dict(state)
    cls = getattr(np.random, str(data.get("bit_generator")), None)
    if not (isinstance(cls, type) and issubclass(cls, np.random.BitGenerator)):
        raise ValueError(f"Unknown numpy bit generator {data.get('bit_generator')!r}")
    bit_generator = cls()
    bit_generator.state = data
    return np.random.Generator(bit_generator)


def device_generator(
    current: torch.Generator | None, device: str | torch.device, seeds: np.random.Generator
) -> torch.Generator:
    """An agent's own torch generator on ``device``, made once from its numpy generator.

    Args:
        current: The generator the agent holds (``None`` before its first build).
        device: Where the draws happen.
        seeds: The agent's numpy generator, which seeds a new generator once.

    Returns:
        ``current`` when it is already on ``device``'s type; else a new generator,
        carrying ``current``'s state across devices (:func:`restore_generator`) or,
        the first time, seeded from ``seeds``.
    """
    device = torch.device(device)
    if current is not None and current.device.type == device.type:
        return current
    generator = torch.Generator(device=device)
    if current is None:
        generator.manual_seed(int(seeds.integers(0, 2**62)))
    else:
        restore_generator(generator, current.get_state())
    return generator
