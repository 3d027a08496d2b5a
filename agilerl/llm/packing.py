"""Sequence packing for teacher-forced fine-tuning (``algorithm.use_sequence_packing``).

A micro-batch's sequences are laid end to end in rows of at most twice its
longest sequence, balanced so the rows (as wide as the fullest one) end close
together, so the forward pass computes fewer padding positions
(:func:`balanced_bins`; a sequence is never split). A *unit* is what stays
together: one sequence for SFT, a preference pair (chosen then rejected, in one
packed row) for DPO, which always fits. The cap bounds attention: without a
variable-length kernel (a CPU's sdpa) each token's scores span its whole packed
row, so wider rows add attention work faster than they remove padding.

Attention stays within each sequence through its position ids alone: they
restart at 0 at every sequence's first token and no 2-D attention mask is
passed, which transformers reads as packed sequences and turns into a
block-diagonal causal mask (sdpa, eager and flex attention; flash attention
reads the restarts as variable-length sequences). A packed row's padded tail
restarts its positions too, so it is a block of its own. Each sequence therefore
gets the logits it gets alone; :func:`check_packing_isolates` verifies this once
per model (and attention implementation), since a model that builds its own mask
could ignore the restarts.
"""

from __future__ import annotations

from typing import Any

import torch

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.llm.fused_logps import head_logps
from agilerl.llm.model import _takes_logits_to_keep, first_target, target_logps_by_rows
from agilerl.llm.row_chunks import row_slices


def balanced_bins(sizes: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``sizes`` grouped into few bins, each summing to at most ``capacity``,
    with loads as even as the items allow.

    From ``ceil(sum / capacity)`` bins up, the first bin count that either plan fits
    wins: items longest first (ties by index) to the least-loaded bin, else
    (uneven but fuller) to the first bin with room. The plan is a pure function of
    the sizes; each bin lists its items in index order.

    Raises:
        ValueError: If an item is larger than ``capacity``.
    """
    if sizes and max(sizes) > capacity:
        raise ValueError(f"an item of {max(sizes)} does not fit a bin of {capacity}")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    count = max(1, -(-sum(sizes) // capacity))
    while True:
        for even in (True, False):
            bins = _place(order, sizes, capacity, count, even=even)
            if bins is not None:
                return [sorted(members) for members in bins if members]
        count += 1


def _place(
    order: list[int], sizes: list[int], capacity: int, count: int, *, even: bool
) -> list[list[int]] | None:
    """``count`` bins filled in ``order`` (least-loaded or first-fit), or None if one overflows."""
    bins: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for item in order:
        size = sizes[item]
        if even:
            target = min(range(count), key=lambda b: (loads[b], b))
        else:
            target = next((b for b in range(count) if loads[b] + size <= capacity), 0)
        if loads[target] + size > capacity:
            return None
        bins[target].append(item)
        loads[target] += size
    return bins


def pack_rows(
    prompts: list[list[int]],
    completions: list[list[list[int]]],
    pad_token_id: int,
    capacity: int | None = None,
) -> dict[str, torch.Tensor]:
    """Pack prompt + completion sequences, the completions of one row kept together.

    Sequence ``k * B + r`` is row ``r``'s ``k``-th completion after its prompt
    (the order of the padded collation: every chosen, then every rejected).

    Args:
        prompts: ``B`` prompt token lists.
        completions: Per row, its completions' token lists (one for SFT, two for DPO).
        pad_token_id: Id written to the packed rows' padded tails.
        capacity: Most tokens per packed row (raised to the longest unit if shorter);
            ``None``: twice the longest sequence.

    Returns:
        ``input_ids``, ``position_ids``, ``loss_mask`` (``(R, W)``, 1 on completion
        tokens) and, for each of the ``N`` sequences, where its targets are in the
        packed targets ``input_ids[:, 1:]``: ``seq_row``, ``seq_col`` and
        ``seq_valid`` (``(N, L)``, ``L`` the longest sequence's target count).
    """
    rows = len(prompts)
    units = [[prompt + c for c in row] for prompt, row in zip(prompts, completions, strict=True)]
    sizes = [sum(map(len, unit)) for unit in units]
    if capacity is None:
        capacity = 2 * max(len(sequence) for unit in units for sequence in unit)
    bins = balanced_bins(sizes, max(capacity, *sizes))
    width = max(sum(sizes[r] for r in members) for members in bins)
    ids = torch.full((len(bins), width), pad_token_id, dtype=torch.long)
    positions = torch.zeros((len(bins), width), dtype=torch.long)
    loss = torch.zeros((len(bins), width), dtype=torch.long)
    count = rows * len(completions[0])
    seq_row = torch.zeros(count, dtype=torch.long)
    seq_start = torch.zeros(count, dtype=torch.long)
    seq_len = torch.zeros(count, dtype=torch.long)
    for b, members in enumerate(bins):
        at = 0
        for r in members:
            for k, sequence in enumerate(units[r]):
                n = len(sequence)
                ids[b, at : at + n] = torch.tensor(sequence, dtype=torch.long)
                positions[b, at : at + n] = torch.arange(n)
                loss[b, at + len(prompts[r]) : at + n] = 1
                i = k * rows + r
                seq_row[i], seq_start[i], seq_len[i] = b, at, n
                at += n
        positions[b, at:] = torch.arange(width - at)
    offsets = torch.arange(int(seq_len.max()) - 1)
    valid = offsets < (seq_len - 1)[:, None]
    return {
        "input_ids": ids,
        "position_ids": positions,
        "loss_mask": loss,
        "seq_row": seq_row[:, None].expand(-1, len(offsets)).contiguous(),
        "seq_col": torch.where(valid, seq_start[:, None] + offsets, 0),
        "seq_valid": valid,
    }


def packed_logprobs(
    model: Any,
    batch: dict[str, torch.Tensor],
    *,
    fp32: bool = True,
    fused: bool = False,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of each sequence in a packed batch.

    Fused, the language-model head runs only on the positions that predict a
    loss-mask token (each packed row also holds prompts and other sequences);
    otherwise the log-probs come from the model's logits, as in
    :func:`~agilerl.llm.model.sequence_logprobs`.

    Args:
        model: Causal LM that reads restarting position ids as sequence boundaries.
        batch: :func:`pack_rows` output (on the model's device).
        fp32: Compute the log-softmax in float32.
        fused: Log-probs from the hidden states (:func:`~agilerl.llm.fused_logps.head_logps`).
        chunk_rows: Packed rows per forward pass (``None``: all at once).

    Returns:
        ``(token_logps, mask)``, both ``(N, L)``: sequence ``i``'s targets from its
        second token on; ``token_logps`` is 0 where ``mask`` (its loss mask) is 0.
    """
    input_ids, positions = batch["input_ids"], batch["position_ids"]
    targets_mask = batch["loss_mask"][:, 1:]
    rows, columns = batch["seq_row"], batch["seq_col"]
    wanted = targets_mask[rows, columns].bool() & batch["seq_valid"]
    if not fused:
        first = first_target(targets_mask)
        # no 2-D mask: the restarting positions are the sequence boundaries
        logps = target_logps_by_rows(
            model, input_ids, None, positions, first, fp32=fp32, fused=False, chunk_rows=chunk_rows
        )
        mask = wanted.to(logps.dtype)
        # every column before ``first`` is outside each loss mask
        return logps[rows, (columns - first).clamp(min=0)] * mask, mask
    entries, values = [], []
    for part in row_slices(input_ids.shape[0], chunk_rows):
        out = model(
            input_ids=input_ids[part],
            position_ids=positions[part],
            use_cache=False,
            output_hidden_states=True,
            **({"logits_to_keep": 1} if _takes_logits_to_keep(model) else {}),
        )
        here = wanted & (rows >= part.start) & (rows < part.stop)
        row, column = rows[here], columns[here]
        hidden = out.hidden_states[-1][row - part.start, column]  # predicts token column + 1
        targets = input_ids[:, 1:][row, column]
        values.append(head_logps(model, hidden[None], targets[None], fp32=fp32)[0])
        entries.append(here.nonzero())
    index = torch.cat(entries)
    logps = torch.zeros(wanted.shape, dtype=values[0].dtype, device=input_ids.device)
    logps = logps.index_put((index[:, 0], index[:, 1]), torch.cat(values))
    return logps, wanted.to(logps.dtype)


def padded_positions(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """``(positions, padding)``: token positions a forward over ``batch`` computes, and
    how many of them are padding (packed or padded collation alike)."""
    total = batch["input_ids"].numel()
    if "attention_mask" in batch:
        return total, total - int(batch["attention_mask"].sum())
    return total, total - int(batch["seq_valid"].sum()) - batch["seq_valid"].shape[0]


def check_packing_isolates(model: Any, *, tolerance: float = 1e-3) -> None:
    """Refuse packing for a model that lets packed sequences attend to each other.

    Two short sequences run packed and alone (dropout off, no gradients); the
    second one's logits must agree.

    Raises:
        ConfigError: Naming ``algorithm.use_sequence_packing`` when they differ.
    """
    device = next(model.parameters()).device
    vocab = model.get_output_embeddings().out_features
    first = torch.arange(1, 6) % vocab
    second = torch.arange(7, 11) % vocab
    packed = torch.cat([first, second])[None].to(device)
    positions = torch.cat([torch.arange(5), torch.arange(4)])[None].to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            together = model(input_ids=packed, position_ids=positions, use_cache=False).logits
            alone = model(input_ids=second[None].to(device), use_cache=False).logits
    finally:
        model.train(was_training)
    gap = (together[:, 5:].float() - alone.float()).abs().max()
    if gap > tolerance * max(1.0, float(alone.float().abs().max())):
        implementation = getattr(model.config, "_attn_implementation", None)
        raise ConfigError(
            [
                Problem(
                    "algorithm.use_sequence_packing",
                    f"{type(model).__name__} (attention {implementation}) lets packed rows "
                    "attend to each other (it ignores restarting position ids); remove "
                    "algorithm.use_sequence_packing or set algorithm.attn_implementation: sdpa",
                )
            ]
        )
