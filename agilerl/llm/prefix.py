"""Forward passes that run a prompt shared by several sequences once.

The completions of a GRPO group share their prompt. Running every sequence
whole repeats the prompt's work ``group_size`` times; here each distinct
prompt runs once with the KV cache on, its keys and values are indexed out to
the sequences that share it (autograd sums their gradients back), and only the
rest of each sequence runs on top. The results equal a whole-sequence pass up
to float rounding. Generation uses the same cache for its prefill.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import torch

from agilerl.llm.fused_logps import head_logps
from agilerl.llm.model import _takes_logits_to_keep, left_pad, position_ids_from_mask


def shared_prefixes(
    sequences: list[list[int]], starts: list[int]
) -> tuple[list[list[int]], list[int]] | None:
    """Distinct prefixes ``seq[: start - 1]`` and the index of each sequence's prefix.

    ``starts[i]`` is the first position of ``sequences[i]`` whose log-prob is
    wanted; the token before it stays in the sequence's own part (its logits
    predict that position). ``None`` when sharing saves nothing: no prefix is
    shared by two sequences, or one is empty.
    """
    index: dict[tuple[int, ...], int] = {}
    owner = [
        index.setdefault(tuple(seq[: start - 1]), len(index))
        for seq, start in zip(sequences, starts, strict=True)
    ]
    if len(index) == len(sequences) or any(not key for key in index):
        return None
    return [list(key) for key in index], owner


@cache
def _cache_kwarg(forward: Any) -> str:
    # transformers renamed ``past_key_values`` to ``cache`` during 5.x.
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_kwarg(model: Any) -> str:
    """The name of the KV-cache argument (and output field) of ``model``'s forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_kwarg(type(base).forward)


def prefix_cache(
    model: Any, prefixes: list[list[int]], owner: list[int], pad_id: int
) -> tuple[Any, torch.Tensor]:
    """KV cache of the left-padded ``prefixes``, one row per sequence, and its attention mask.

    Args:
        model: Causal LM with a dynamic KV cache.
        prefixes: Distinct prefixes (from :func:`shared_prefixes`).
        owner: Per sequence, the index of its prefix.
        pad_id: Padding token id.

    Returns:
        ``(cache, mask)``: the cache with ``len(owner)`` rows and their ``(B, P)`` mask.
    """
    device = next(model.parameters()).device
    ids, mask = left_pad(prefixes, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    kwargs: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": position_ids_from_mask(mask),
        "use_cache": True,
    }
    if _takes_logits_to_keep(model):
        kwargs["logits_to_keep"] = 1  # the prefix's logits are never used
    kv = getattr(model(**kwargs), cache_kwarg(model))
    rows = torch.tensor(owner, device=device)
    kv.batch_select_indices(rows)
    return kv, mask[rows]


def prefix_token_logps(
    model: Any,
    sequences: list[list[int]],
    starts: list[int],
    shared: tuple[list[list[int]], list[int]],
    pad_id: int,
    *,
    temperature: float = 1.0,
    keep: int,
    hidden: bool = False,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of each sequence's tokens from ``starts[i]`` on, each shared prefix run once.

    The result has :func:`~agilerl.llm.generation.token_logps`'s layout for
    the left-padded batch of ``sequences``: ``(B, keep)`` aligned with the
    sequence ends, and zero (not computed) at targets before ``starts[i]``.

    Args:
        model: Causal LM with a dynamic KV cache (not gradient-checkpointed).
        sequences: Token ids of each sequence.
        starts: Per sequence, the first target position wanted (``>= 1``).
        shared: :func:`shared_prefixes` of ``sequences`` and ``starts``.
        pad_id: Padding token id.
        temperature: Logits are divided by it (as in the sampler).
        keep: Width of the result; ``len(seq) - start`` or more keeps every wanted target.
        hidden: Also return the last layer's hidden states at the predicting positions.
        fused: Compute the log-probs from the hidden states a chunk at a time
            (:func:`~agilerl.llm.fused_logps.head_logps`) instead of from full logits.

    Returns:
        ``(logps, hidden_states)`` with ``logps`` of shape ``(B, keep)``.
    """
    device = next(model.parameters()).device
    kv, prefix_mask = prefix_cache(model, *shared, pad_id)
    # Each sequence's own part, from the token before its first target, padded on the right.
    tails = [seq[start - 1 :] for seq, start in zip(sequences, starts, strict=True)]
    width = max(map(len, tails))
    tail_ids = torch.full((len(tails), width), pad_id, dtype=torch.long)
    tail_mask = torch.zeros((len(tails), width), dtype=torch.long)
    for i, tail in enumerate(tails):
        tail_ids[i, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        tail_mask[i, : len(tail)] = 1
    tail_ids, tail_mask = tail_ids.to(device), tail_mask.to(device)
    positions = prefix_mask.sum(1, keepdim=True) + torch.arange(width, device=device)
    out = model(
        input_ids=tail_ids,
        attention_mask=torch.cat([prefix_mask, tail_mask], dim=1),
        position_ids=positions,
        use_cache=True,
        output_hidden_states=hidden or fused,
        **({"logits_to_keep": 1} if fused and _takes_logits_to_keep(model) else {}),
        **{cache_kwarg(model): kv},
    )
    targets = tail_ids[:, 1:]
    if fused:
        logps = head_logps(model, out.hidden_states[-1][:, :-1], targets, temperature=temperature)
    else:
        logits = out.logits[:, :-1].float() / temperature
        logps = -torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
        ).view(targets.shape)
    # Tail targets start at column 0; the result's end at column ``keep - 1``.
    counts = torch.tensor([len(t) - 1 for t in tails], device=device)
    columns = torch.arange(keep, device=device)
    offset = (keep - counts)[:, None]
    valid = columns >= offset
    index = (columns - offset).clamp(min=0)
    logps = logps.gather(1, index) * valid
    states = None
    if hidden:
        last = out.hidden_states[-1][:, :-1]
        states = last.gather(1, index[..., None].expand(-1, -1, last.shape[-1])) * valid[..., None]
    return logps, states
