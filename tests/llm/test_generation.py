"""Generation: sampler log-probs equal a recomputed forward pass under left padding."""

from __future__ import annotations

import re

import pytest
import torch

from agilerl.llm.generation import SamplingSettings, generate, left_pad, token_logps
from agilerl.llm.model import load_causal_lm

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_causal_lm(tiny_model_dir)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_a_recomputed_forward_pass(
    model, left_tokenizer, temperature: float
) -> None:
    tok = left_tokenizer
    texts = ["Hello there, what is 2 plus 3?", "Hi", "What colour is the apple today?", "A"]
    prompts = [tok(t)["input_ids"] for t in texts] * 2
    torch.manual_seed(0)
    settings = SamplingSettings(max_new_tokens=12, temperature=temperature, top_k=50)
    completions = generate(model, tok, prompts, settings)
    assert len({len(p) for p in prompts}) > 1  # rows really are left padded differently
    ids, mask = left_pad(
        [p + c.ids for p, c in zip(prompts, completions, strict=False)], tok.pad_token_id
    )
    with torch.no_grad():
        recomputed, _ = token_logps(model, ids, mask, temperature=temperature)
    for i, completion in enumerate(completions):
        n = len(completion.ids)
        assert n >= 1
        assert torch.allclose(recomputed[i, -n:], torch.tensor(completion.logps), atol=1e-3)


def test_same_seed_same_completions_and_the_context_cap(model, left_tokenizer) -> None:
    tok = left_tokenizer
    prompts = [tok("Count to ten.")["input_ids"]] * 3
    settings = SamplingSettings(max_new_tokens=50, max_model_len=len(prompts[0]) + 5)
    torch.manual_seed(3)
    first = generate(model, tok, prompts, settings)
    torch.manual_seed(3)
    second = generate(model, tok, prompts, settings)
    assert [c.ids for c in first] == [c.ids for c in second]
    assert all(len(c.ids) <= 5 for c in first)


def test_stop_strings_end_a_completion(model, left_tokenizer) -> None:
    tok = left_tokenizer
    prompts = [tok("Hello")["input_ids"]] * 4
    torch.manual_seed(0)
    free = generate(model, tok, prompts, SamplingSettings(max_new_tokens=24, greedy=True))
    words = re.findall(r"[a-z]{2,}", free[0].text[2:])  # a word greedy decoding will produce
    assert words
    stop = words[0]
    torch.manual_seed(0)
    cut = generate(
        model, tok, prompts, SamplingSettings(max_new_tokens=24, greedy=True, stop_strings=[stop])
    )
    assert stop in cut[0].text and len(cut[0].ids) < len(free[0].ids)
    assert free[0].text.startswith(cut[0].text)


def test_a_stop_request_ends_generation_at_the_next_token(model, left_tokenizer) -> None:
    """A stop signal during a round's generation must not wait for its last token."""
    from agilerl.llm.generation import stop_generation_when

    tok = left_tokenizer
    prompts = [tok("Count to ten.")["input_ids"]] * 4
    settings = SamplingSettings(max_new_tokens=32, temperature=1.0)
    torch.manual_seed(1)
    free = generate(model, tok, prompts, settings)
    assert max(len(c.ids) for c in free) > 4
    with stop_generation_when(lambda: True):
        cut = generate(model, tok, prompts, settings)
    assert all(len(c.ids) <= 1 for c in cut)
    with stop_generation_when(lambda: False):  # no stop: generation is unchanged
        torch.manual_seed(1)
        again = generate(model, tok, prompts, settings)
    assert [c.ids for c in again] == [c.ids for c in free]
