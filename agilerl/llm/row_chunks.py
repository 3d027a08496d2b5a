"""Log-probs of a batch computed a few rows at a time (``algorithm.chunk_rows``).

A batch's rows go through the model ``chunk_rows`` at a time and the pieces
are joined again, so one forward pass holds the activations, attention scores
and logits of ``chunk_rows`` rows instead of the whole batch's. The values and
gradients are the unchunked ones (each row's log-probs depend on that row
alone); what the chunks save is transient memory, most in the passes without
gradients (reference and old-policy log-probs) and under gradient
checkpointing, where the backward too recomputes one chunk at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def row_slices(rows: int, chunk_rows: int | None) -> list[slice]:
    """Consecutive slices of ``rows`` rows, ``chunk_rows`` each (one slice when ``None``)."""
    if chunk_rows is None or rows <= chunk_rows:
        return [slice(0, rows)]
    return [slice(start, min(start + chunk_rows, rows)) for start in range(0, rows, chunk_rows)]


def cat_right_aligned(parts: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Join ``(b_i, w_i, ...)`` pieces along rows, each left-padded with zeros to ``width``.

    Pieces narrower than ``width`` are right-aligned: their columns are the
    last ones, as for log-probs aligned with the ends of left-padded sequences.
    """
    padded = []
    for part in parts:
        missing = width - part.shape[1]
        if missing:
            zeros = part.new_zeros((part.shape[0], missing, *part.shape[2:]))
            part = torch.cat([zeros, part], dim=1)
        padded.append(part)
    return padded[0] if len(padded) == 1 else torch.cat(padded)


def forward_by_row_chunks(
    forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
    rows: Sequence[Any],
    chunk_rows: int,
    *,
    keep: int,
    hidden: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A rollout forward (``forward(rows, hidden=, keep=)``) run ``chunk_rows`` samples at a time.

    Each chunk is padded to its own longest sample, so it asks for at most that
    many targets; its ``(b, w)`` log-probs (and ``(b, w, H)`` hidden states) are
    right-aligned into the ``(B, keep)`` layout of one forward over every row.

    Args:
        forward: Called on each chunk of samples (each with an ``ids`` list).
        rows: The samples.
        chunk_rows: Samples per forward.
        keep: Width of the result (target positions aligned with the sequence ends).
        hidden: Also return the hidden states.
    """
    logps, states = [], []
    for part in row_slices(len(rows), chunk_rows):
        chunk = rows[part]
        width = min(keep, max(len(s.ids) for s in chunk) - 1)
        chunk_logps, chunk_states = forward(chunk, hidden=hidden, keep=width)
        logps.append(chunk_logps)
        states.append(chunk_states)
    joined_states = cat_right_aligned(states, keep) if hidden else None
    return cat_right_aligned(logps, keep), joined_states
