"""use_liger_loss: log-probs from hidden states a chunk at a time equal the full-logits ones."""

from __future__ import annotations

import pytest
import torch

from agilerl.builders.llm import LLMBuilder
from agilerl.llm.fused_logps import head_logps
from agilerl.llm.generation import token_logps
from agilerl.llm.model import sequence_logprobs
from agilerl.llm.prefix import prefix_token_logps, shared_prefixes
from agilerl.llm.rollout import collate

pytestmark = pytest.mark.llm


def _grads(agent, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    params = dict(agent._named_trainable())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {n: g for n, g in zip(params, grads, strict=True) if g is not None}


def test_fused_rollout_logps_and_gradients_equal_the_full_logits_ones(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = LLMBuilder.build(make_rollout_spec("GRPO", group_size=2), tokenizer=left_tokenizer)
    torch.manual_seed(0)
    samples = agent.rollout(digit_env, digit_env.batch(0, 2, 0))
    batch = collate(samples, left_tokenizer.pad_token_id)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    out = {}
    for fused in (False, True):
        logps, _ = token_logps(agent.actor, ids, mask, temperature=0.7, fused=fused)
        out[fused] = (logps.detach(), _grads(agent, (logps * batch["action_mask"][:, 1:]).sum()))
    assert torch.allclose(out[False][0], out[True][0], atol=1e-5)
    assert out[False][1].keys() == out[True][1].keys() and out[True][1]
    for name, grad in out[False][1].items():  # lm_head copy and LoRA tensors alike
        assert torch.allclose(grad, out[True][1][name], atol=1e-5, rtol=1e-4), name
    # the shared-prefix path (a prompt run once per group) gives the same values fused
    starts = [next(i for i, m in enumerate(s.action_mask) if m) for s in samples]
    sequences = [s.ids for s in samples]
    shared = shared_prefixes(sequences, starts)
    keep = ids.shape[1] - 1 - min(starts) + 1
    prefixed = {
        fused: prefix_token_logps(
            agent.actor, sequences, starts, shared, left_tokenizer.pad_token_id,
            temperature=0.7, keep=keep, fused=fused,
        )[0].detach()
        for fused in (False, True)
    }  # fmt: skip
    assert torch.allclose(prefixed[False], prefixed[True], atol=1e-5)


def test_fused_dataset_logps_equal_and_small_chunks_change_nothing(
    make_spec, make_env, tokenizer
) -> None:
    agent = LLMBuilder.build(make_spec("SFT"), tokenizer=tokenizer)
    env = make_env("sft")
    batch = env.collate(env.train.rows[:4])
    values = {
        fused: sequence_logprobs(
            agent.actor, batch["input_ids"], batch["attention_mask"], batch["loss_mask"],
            fused=fused,
        )[0].detach()
        for fused in (False, True)
    }  # fmt: skip
    assert torch.allclose(values[False], values[True], atol=1e-5)
    hidden = torch.randn(2, 5, agent.actor.get_output_embeddings().in_features)
    targets = torch.randint(0, 10, (2, 5))
    one = head_logps(agent.actor, hidden, targets, chunk_tokens=1)
    all_at_once = head_logps(agent.actor, hidden, targets, chunk_tokens=100)
    assert torch.allclose(one, all_at_once, atol=1e-6)
