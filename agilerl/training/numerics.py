"""The CPU's floating-point mode for a run: subnormal numbers flushed to zero."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def flushing_denormals() -> bool:
    """Whether CPU arithmetic on this thread flushes subnormal floats to zero.

    torch has a setter and no getter, so this probes: ``1e-40`` is subnormal in
    float32 and comes out as zero only while flushing is on.
    """
    return bool(torch.tensor(1e-40, dtype=torch.float32).mul(1.0).item() == 0.0)


@contextmanager
def denormals_flushed(enabled: bool = True) -> Iterator[bool]:
    """Flush subnormal floats to zero in this thread's CPU arithmetic inside the block.

    Adam's first moment for a parameter whose gradient stays zero (the weights of
    a dead ReLU unit, say) shrinks by ``beta1`` every step until it is subnormal,
    and from then on every fused optimizer step and every op reading it goes
    through the processor's slow path for subnormal operands. Flushing them to
    zero changes no value that stays above ``torch.finfo(torch.float32).tiny``
    (~1.2e-38) and is deterministic. The mode is restored on exit.

    Args:
        enabled: ``False`` leaves the mode as it is.

    Yields:
        Whether flushing is on inside the block.
    """
    before = flushing_denormals()
    if not enabled or before:
        yield before
        return
    supported = torch.set_flush_denormal(True)
    try:
        yield supported
    finally:
        if supported:
            torch.set_flush_denormal(False)
