"""Shared-prompt passes equal whole-sequence passes: log-probs, hidden states, gradients."""

from __future__ import annotations

import pytest
import torch

from agilerl.llm.generation import SamplingSettings, generate, token_logps
from agilerl.llm.model import left_pad, load_causal_lm
from agilerl.llm.prefix import prefix_token_logps, shared_prefixes

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def peft_model(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"]
    )
    model = get_peft_model(load_causal_lm(tiny_model_dir), config)
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # a non-zero adapter, so its gradients reach the prompt's keys
            torch.nn.init.normal_(param, std=0.1)
    return model


def _groups(tok, group: int = 3) -> tuple[list[list[int]], list[int]]:
    """Prompts of different lengths, ``group`` completions of different lengths each."""
    gen = torch.Generator().manual_seed(1)
    seqs, starts = [], []
    for text in ["Hello there, what is 2 plus 3?", "Hi you", "What colour is it"]:
        prompt = tok(text)["input_ids"]
        for _ in range(group):
            n = int(torch.randint(1, 9, (1,), generator=gen))
            seqs.append(prompt + torch.randint(5, 300, (n,), generator=gen).tolist())
            starts.append(len(prompt))
    return seqs, starts


def test_shared_prefixes_only_when_a_prompt_is_shared() -> None:
    prefixes, owner = shared_prefixes([[1, 2, 3, 9], [1, 2, 3, 8], [4, 3]], [3, 3, 2])
    assert prefixes == [[1, 2], [4]] and owner == [0, 0, 1]
    assert shared_prefixes([[1, 2, 3], [4, 5, 6]], [2, 2]) is None
    assert shared_prefixes([[1, 2], [1, 3]], [1, 1]) is None  # empty prefix: nothing to share


def test_prefix_pass_equals_the_whole_pass_and_its_gradients(peft_model, left_tokenizer) -> None:
    model = peft_model
    seqs, starts = _groups(left_tokenizer)
    ids, mask = left_pad(seqs, left_tokenizer.pad_token_id)
    keep = max(len(s) - st for s, st in zip(seqs, starts, strict=True))
    wanted = torch.zeros(len(seqs), keep)
    for i, (seq, start) in enumerate(zip(seqs, starts, strict=True)):
        wanted[i, keep - (len(seq) - start) :] = 1
    model.train()
    grads = []
    results = []
    for prefix in (False, True):
        model.zero_grad(set_to_none=True)
        if prefix:
            shared = shared_prefixes(seqs, starts)
            pad = left_tokenizer.pad_token_id
            logps, states = prefix_token_logps(
                model, seqs, starts, shared, pad, temperature=0.7, keep=keep, hidden=True
            )
        else:
            logps, states = token_logps(model, ids, mask, temperature=0.7, keep=keep, hidden=True)
        ((logps * wanted).sum() + (states * wanted[..., None]).pow(2).mean()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        results.append((logps.detach(), states.detach()))
    (whole, whole_states), (shared_logps, shared_states) = results
    assert torch.allclose(whole * wanted, shared_logps, atol=1e-5)
    assert torch.allclose(whole_states * wanted[..., None], shared_states, atol=1e-5)
    assert (shared_logps[wanted == 0] == 0).all()
    assert grads[0].keys() == grads[1].keys() and any("lora_A" in n for n in grads[0])
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-5, rtol=1e-4), name


def test_a_group_prefilled_once_samples_what_each_prompt_alone_does(
    tiny_model_dir, left_tokenizer
) -> None:
    model = load_causal_lm(tiny_model_dir)
    tok = left_tokenizer
    prompts = [tok(t)["input_ids"] for t in ["Count to ten.", "What is 2 plus 2 today?"]]
    settings = SamplingSettings(max_new_tokens=10, greedy=True)
    grouped = generate(model, tok, [p for p in prompts for _ in range(3)], settings)
    alone = [generate(model, tok, [p], settings)[0] for p in prompts]
    for i, completion in enumerate(grouped):
        assert completion.ids == alone[i // 3].ids
        assert torch.allclose(
            torch.tensor(completion.logps), torch.tensor(alone[i // 3].logps), atol=1e-4
        )
