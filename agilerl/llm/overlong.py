"""Completions that run into the length cap: DAPO's overlong filtering and soft punishment.

A completion is *truncated* when generation stopped it at the token cap
instead of the model ending it (an EOS token or a stop string): its reward
judges an unfinished answer. Overlong filtering keeps such completions out of
the loss (``mask_truncated_completions``); the soft punishment lowers the
reward of a completion linearly over the last ``buffer`` tokens before the cap,
from 0 at ``cap - buffer`` tokens to ``-factor`` at ``cap`` (``overlong_buffer_len``,
``overlong_penalty_factor``), per assistant turn.
"""

from __future__ import annotations

from collections.abc import Iterable


def is_truncated(
    ids: list[int], text: str, eos_ids: Iterable[int], stop_strings: Iterable[str] | None
) -> bool:
    """Whether a completion was cut by the length cap: it ends with no EOS token and holds
    no stop string (generation stops at the first one; its last token may run past it).
    An empty completion ended before it began: not truncated."""
    if not ids or ids[-1] in set(eos_ids):
        return False
    return not any(stop in text for stop in stop_strings or ())


def turn_lengths(action_mask: list[int]) -> list[int]:
    """Generated tokens of each assistant turn: the runs of 1 in ``action_mask``."""
    lengths: list[int] = []
    previous = 0
    for flag in action_mask:
        if flag and not previous:
            lengths.append(0)
        if flag:
            lengths[-1] += 1
        previous = flag
    return lengths


def overlong_penalty(length: int, cap: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment of one completion of ``length`` tokens.

    ``0`` up to ``cap - buffer`` tokens, then falling linearly to ``-factor`` at
    ``cap`` (and staying there past it).
    """
    free = cap - buffer
    if length <= free:
        return 0.0
    return -factor * min(1.0, (length - free) / buffer)


def episode_penalty(action_mask: list[int], cap: int, buffer: int, factor: float = 1.0) -> float:
    """The soft punishment summed over an episode's assistant turns (each capped at ``cap``)."""
    return sum(overlong_penalty(n, cap, buffer, factor) for n in turn_lengths(action_mask))
