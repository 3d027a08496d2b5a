"""Sampling completions with HF ``generate``: left padding, stop strings, sampler log-probs,
the context cap and the generation controls (:mod:`agilerl.llm.constraints`).

The sampler's log-probabilities are taken from the raw logits ``generate``
returns, divided by the temperature: the same quantity the update recomputes
from a forward pass (:func:`token_logps`), so they serve as the "old"
log-probs of the clipped ratio without a second forward pass. A token an
answer pattern restricted the choice of was still sampled from the policy
(among the tokens the pattern allows): its log-prob is the policy's.

A prompt plus its completion never exceeds ``max_model_len``: a prompt that
fills it on its own gets an empty completion (nothing is generated for it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from agilerl.llm.constraints import Controller, GenerationControls
from agilerl.llm.fused_logps import head_logps
from agilerl.llm.model import _takes_logits_to_keep, left_pad, position_ids_from_mask
from agilerl.llm.prefix import cache_kwarg, prefix_cache, shared_prefixes

_STOP_CHECKS: list[Callable[[], bool]] = []


@contextlib.contextmanager
def stop_generation_when(check: Callable[[], bool]) -> Iterator[None]:
    """Within this context, :func:`generate` ends every sequence at the next token once
    ``check()`` is true (a stop signal arrived): a round the loop then drops does not keep
    a checkpoint waiting for the rest of its generation."""
    _STOP_CHECKS.append(check)
    try:
        yield
    finally:
        _STOP_CHECKS.remove(check)


def _stop_criteria() -> Any:
    """HF stopping criteria for the innermost :func:`stop_generation_when` check."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    check = _STOP_CHECKS[-1]

    class _Stopped(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), bool(check()), dtype=torch.bool)

    return StoppingCriteriaList([_Stopped()])


@dataclass
class SamplingSettings:
    """How completions are sampled (from the algorithm spec).

    Attributes:
        max_new_tokens: Cap on generated tokens per turn.
        temperature: Sampling temperature (also divides the logits of the log-probs).
        top_p: Nucleus mass.
        top_k: Top-k; 0 disables.
        min_p: Min-p.
        repetition_penalty: HF repetition penalty.
        min_new_tokens: Floor on generated tokens.
        stop_strings: Strings that end a completion (the string is kept).
        greedy: Argmax decoding (evaluation).
        chunk_size: Prompts per ``generate`` call (``None``: all at once).
        max_model_len: Context length: prompt plus completion never exceed it.
        controls: Thinking budget and answer pattern (see :mod:`agilerl.llm.constraints`).
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int | None = None
    stop_strings: list[str] | None = None
    greedy: bool = False
    chunk_size: int | None = None
    max_model_len: int = 1024
    controls: GenerationControls = field(default_factory=GenerationControls)


@dataclass
class Completion:
    """One sampled completion: its tokens, their sampler log-probs and text.

    ``forced`` lists the indices (in ``ids``) of tokens the thinking budget forced
    rather than the policy sampled; the update leaves them out of the loss.
    """

    ids: list[int]
    logps: list[float]
    text: str
    forced: list[int] = field(default_factory=list)


def _cut(tokens: list[int], eos_ids: set[int], pad_id: int) -> int:
    """Length of a generated row: through the first EOS, else up to the padding."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return i + 1
        if token == pad_id:
            return i
    return len(tokens)


@torch.no_grad()
def generate(
    model: Any, tokenizer: Any, prompts: list[list[int]], settings: SamplingSettings
) -> list[Completion]:
    """Sample one completion per prompt (repeat a prompt in ``prompts`` for a group).

    Args:
        model: Causal LM (a ``PeftModel`` generates with its active adapter).
        tokenizer: Its tokenizer (pad and EOS ids, stop strings, decoding).
        prompts: Token ids of each prompt.
        settings: Sampling settings.

    Returns:
        One :class:`Completion` per prompt, in order (empty for a prompt that fills
        ``settings.max_model_len``).
    """
    out: list[Completion] = [Completion([], [], "") for _ in prompts]
    fits = [i for i, p in enumerate(prompts) if len(p) < settings.max_model_len]
    chunk = settings.chunk_size or max(1, len(fits))
    for start in range(0, len(fits), chunk):
        rows = fits[start : start + chunk]
        done = _generate_chunk(model, tokenizer, [prompts[i] for i in rows], settings)
        for i, completion in zip(rows, done, strict=True):
            out[i] = completion
    return out


def _generate_chunk(
    model: Any, tokenizer: Any, prompts: list[list[int]], settings: SamplingSettings
) -> list[Completion]:
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id
    eos = tokenizer.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    ids, mask = left_pad(prompts, pad_id)
    budget = max(1, min(settings.max_new_tokens, settings.max_model_len - ids.shape[1]))
    kwargs: dict[str, Any] = {
        "max_new_tokens": budget,
        "pad_token_id": pad_id,
        "eos_token_id": eos,
        "return_dict_in_generate": True,
        "output_logits": True,
    }
    if settings.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(
            do_sample=True,
            temperature=settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k,
            min_p=settings.min_p or None,
        )
    if settings.repetition_penalty != 1.0:
        kwargs["repetition_penalty"] = settings.repetition_penalty
    if settings.min_new_tokens:
        kwargs["min_new_tokens"] = min(settings.min_new_tokens, budget)
    if settings.stop_strings:
        kwargs.update(stop_strings=list(settings.stop_strings), tokenizer=tokenizer)
    controller = None
    if settings.controls.active:
        from transformers import LogitsProcessorList

        controller = Controller(
            settings.controls, tokenizer, prompts, top_k=settings.top_k, greedy=settings.greedy
        )
        kwargs["logits_processor"] = LogitsProcessorList([controller])
    if pad_id not in eos_ids:
        # A sampled pad token would be indistinguishable from padding.
        kwargs["suppress_tokens"] = [pad_id]
    from agilerl.llm import distributed

    sharded = distributed.active() and distributed.is_sharded(model)
    if sharded:
        # Every process must run the same number of sharded forward passes.
        kwargs["synced_gpus"] = True
    elif _STOP_CHECKS:
        kwargs["stopping_criteria"] = _stop_criteria()
    was_training = model.training
    model.eval()
    # Data-parallel processes prefill whole, like their update (see RolloutLLMAlgorithm).
    active = distributed.active()
    shared = None if active else shared_prefixes(prompts, [len(p) for p in prompts])
    if shared is not None:
        # A group's prompt is prefilled once; generate runs only each row's last prompt token.
        kwargs[cache_kwarg(model)], _ = prefix_cache(model, *shared, pad_id)
    result = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
    model.train(was_training)
    generated = result.sequences[:, ids.shape[1] :].cpu()
    temperature = 1.0 if settings.greedy else settings.temperature
    logits = torch.stack(result.logits, dim=1).float().cpu() / temperature
    logps = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
    forced = controller.forced if controller is not None else [[] for _ in prompts]
    completions = []
    for row, row_logps, row_forced in zip(generated.tolist(), logps, forced, strict=True):
        n = _cut(row, eos_ids, pad_id)
        text = tokenizer.decode(row[:n], skip_special_tokens=True)
        kept = [j for j in row_forced if j < n]
        completions.append(Completion(row[:n], row_logps[:n].tolist(), text, forced=kept))
    return completions


def token_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    keep: int | None = None,
    hidden: bool = False,
    position_ids: bool = True,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``input_ids[:, 1:]`` (the last ``keep`` of them) and optionally hidden states.

    Args:
        model: Causal LM.
        input_ids: ``(B, T)`` token ids (left or right padded).
        attention_mask: ``(B, T)``.
        temperature: Logits are divided by it (as in the sampler).
        keep: Only the last ``keep`` target positions (default all ``T - 1``).
        hidden: Also return the last layer's hidden states at the positions
            that predict those targets, ``(B, keep, H)``.
        position_ids: Pass positions computed from the mask (needed under left padding).
        fused: Compute the log-probs from the hidden states a chunk at a time
            (:func:`~agilerl.llm.fused_logps.head_logps`) instead of from full logits.

    Returns:
        ``(logps, hidden_states)`` with ``logps`` of shape ``(B, keep)``.
    """
    keep = input_ids.shape[1] - 1 if keep is None else keep
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "use_cache": False,
    }
    if position_ids:
        kwargs["position_ids"] = position_ids_from_mask(attention_mask)
    if hidden or fused:
        kwargs["output_hidden_states"] = True
    if _takes_logits_to_keep(model) and (fused or not hidden):
        # The language-model head runs only where a log-prob is wanted (and on the last
        # token); fused, only on the last token (the log-probs come from the hidden states).
        kwargs["logits_to_keep"] = 1 if fused else keep + 1
    out = model(**kwargs)
    targets = input_ids[:, -keep:]
    if fused:
        last = out.hidden_states[-1][:, -keep - 1 : -1]
        logps = head_logps(model, last, targets, temperature=temperature)
    else:
        logits = out.logits[:, -keep - 1 : -1].float() / temperature
        logps = -torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
        ).view(targets.shape)
    states = out.hidden_states[-1][:, -keep - 1 : -1] if hidden else None
    return logps, states
