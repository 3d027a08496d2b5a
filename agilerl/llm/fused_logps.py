"""Token log-probs from the last hidden states, the LM head applied a chunk at a time.

``algorithm.use_liger_loss`` (on by default): instead of the model's
``(B, T, V)`` logits, the language-model head and the log-softmax run over
:data:`CHUNK_TOKENS` positions at a time, each chunk under activation
checkpointing, so neither the forward nor the backward ever holds more than
one chunk's logits (the idea of Liger's fused linear cross-entropy, in plain
torch so it runs on a CPU). The values equal the unfused path's up to float
rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_TOKENS = 1024
"""Positions whose logits exist at once (a chunk of ``CHUNK_TOKENS x vocab`` floats)."""


def output_head(model: Any) -> torch.nn.Module:
    """The model's language-model head (with any adapter on it: peft wraps it in place)."""
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings to fuse the loss with")
    return head


def _chunk_logps(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    fp32: bool,
) -> torch.Tensor:
    logits = head(hidden)
    if fp32:
        logits = logits.float()
    logits = logits / temperature
    return -torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def head_logps(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    fp32: bool = True,
    chunk_tokens: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """``log p(targets)`` from the hidden states that predict them, ``targets.shape``.

    Args:
        model: The causal LM whose head maps ``hidden`` to logits.
        hidden: ``(B, K, H)`` last-layer hidden states (after the final norm).
        targets: ``(B, K)`` token ids those states predict.
        temperature: Logits are divided by it (as in the sampler).
        fp32: Compute the log-softmax in float32.
        chunk_tokens: Positions per chunk.
    """
    head = output_head(model)
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1)
    grad = torch.is_grad_enabled()
    pieces = []
    for start in range(0, flat_targets.shape[0], chunk_tokens):
        part = (
            head,
            flat_hidden[start : start + chunk_tokens],
            flat_targets[start : start + chunk_tokens],
            temperature,
            fp32,
        )
        if grad:  # recomputed in the backward: one chunk's logits at a time there too
            pieces.append(checkpoint(_chunk_logps, *part, use_reentrant=False))
        else:
            pieces.append(_chunk_logps(*part))
    if not pieces:
        return torch.zeros(targets.shape, dtype=torch.float32, device=targets.device)
    return torch.cat(pieces).view(targets.shape)
