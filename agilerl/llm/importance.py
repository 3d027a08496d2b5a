"""Where the importance ratio of a rollout update is taken, and which sequences it drops.

A generated sequence's tokens can each carry their own ratio ``pi/pi_old``
(``token``, GRPO's and PPO's default), share one ratio per assistant turn
(``turn``), or one per sequence (``trajectory``: GSPO's sequence-level ratio,
``exp`` of the mean token log-ratio). A shared ratio pools the token
log-ratios of its span: ``mean`` (length-normalised, GSPO) or ``sum`` (the
product of the token ratios).
"""

from __future__ import annotations

from typing import Literal

import torch

Level = Literal["token", "turn", "trajectory"]
Pooling = Literal["sum", "mean"]


def turn_segments(mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` ids of each generated token's turn (1, 2, ... per row; 0 off the mask).

    A turn is a run of consecutive generated tokens: an observation between two
    runs (a multi-turn episode's env message) ends one turn and the next run
    starts another.
    """
    on = mask > 0
    starts = on & ~torch.nn.functional.pad(on[:, :-1], (1, 0), value=False)
    return torch.cumsum(starts.long(), dim=1) * on.long()


def pooled_log_ratio(
    log_ratio: torch.Tensor, mask: torch.Tensor, level: Level, pooling: Pooling = "mean"
) -> torch.Tensor:
    """The log-ratio each token's surrogate uses, ``(B, T)``.

    Args:
        log_ratio: ``log pi - log pi_old`` per token, ``(B, T)``.
        mask: 1 on generated tokens.
        level: ``token`` returns ``log_ratio``; ``turn`` and ``trajectory`` give every
            token of a turn (sequence) its span's pooled log-ratio, with gradients
            flowing to every token of the span.
        pooling: ``mean`` or ``sum`` of the span's token log-ratios.
    """
    if level == "token":
        return log_ratio
    segments = turn_segments(mask) if level == "turn" else (mask > 0).long()
    width = int(segments.max()) + 1
    rows = log_ratio.shape[0]
    index = (segments + width * torch.arange(rows, device=log_ratio.device)[:, None]).flatten()
    masked = (log_ratio * mask).flatten()
    totals = torch.zeros(rows * width, dtype=log_ratio.dtype, device=log_ratio.device)
    totals = totals.index_add(0, index, masked)
    if pooling == "mean":
        counts = torch.zeros_like(totals).index_add(0, index, mask.flatten().to(totals.dtype))
        totals = totals / counts.clamp(min=1.0)
    return totals[index].view_as(log_ratio) * (mask > 0)


def diverged_sequences(
    logps: torch.Tensor,
    old: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    threshold: float,
) -> torch.Tensor:
    """``(B,)`` sequences to drop: negative advantage and a mean KL(old || new) above ``threshold``.

    The KL is the sequence's mean of ``log pi_old - log pi`` over its generated
    tokens (no gradient): a sample the policy has moved away from contributes a
    negative update with a stale ratio, which off-policy sequence masking drops.
    """
    tokens = mask.sum(1).clamp(min=1.0)
    kl = ((old - logps).detach() * mask).sum(1) / tokens
    return (advantages < 0) & (kl > threshold)
