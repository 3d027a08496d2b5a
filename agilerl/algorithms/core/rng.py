"""Restoring a saved ``torch.Generator`` state, also on another kind of device."""

from __future__ import annotations

import hashlib

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
