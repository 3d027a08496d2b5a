"""use_sequence_packing: packed SFT/DPO rows give the unpacked loss with fewer padded tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.builders.llm import LLMBuilder
from agilerl.llm.model import sequence_logprobs
from agilerl.llm.packing import (
    balanced_bins,
    check_packing_isolates,
    pack_rows,
    packed_logprobs,
    padded_positions,
)

pytestmark = pytest.mark.llm


def test_balanced_bins_fit_the_capacity_and_are_a_function_of_the_sizes() -> None:
    sizes = [5, 3, 8, 2, 7, 4, 1, 6]
    bins = balanced_bins(sizes, 12)
    assert sorted(i for b in bins for i in b) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= 12 for b in bins)
    assert len(bins) == 3  # 36 tokens in bins of 12: as few as possible, all full
    assert bins == balanced_bins(sizes, 12)
    assert balanced_bins([4, 4, 4], 4) == [[0], [1], [2]]
    assert balanced_bins([3, 3, 2, 2], 6) == [[0, 2], [1, 3]]  # even loads
    with pytest.raises(ValueError, match="does not fit"):
        balanced_bins([5], 4)


def test_pack_rows_restarts_positions_and_keeps_each_pair_in_one_row() -> None:
    prompts = [[1, 2], [3], [4, 5, 6]]
    completions = [[[7], [8, 9]], [[10, 11], [12]], [[13], [14]]]
    packed = pack_rows(prompts, completions, pad_token_id=0, capacity=9)
    ids, positions = packed["input_ids"], packed["position_ids"]
    rows, cols, valid = packed["seq_row"], packed["seq_col"], packed["seq_valid"]
    for i, (prompt, row) in enumerate(zip(prompts, completions, strict=True)):
        for k, completion in enumerate(row):
            seq = k * len(prompts) + i  # the padded layout: every chosen, then every rejected
            targets = ids[:, 1:][rows[seq], cols[seq]][valid[seq]]
            assert targets.tolist() == (prompt + completion)[1:]
        assert rows[i, 0] == rows[i + len(prompts), 0]  # chosen and rejected share a row
    assert (positions[ids == 1] == 0).all() and (positions[ids == 3] == 0).all()
    total, padding = padded_positions(packed)
    assert total - padding == sum(
        len(p) * 2 + sum(map(len, c)) for p, c in zip(prompts, completions, strict=True)
    )


def _agent(make_spec: Any, tokenizer: Any, name: str, **fields: Any) -> Any:
    return LLMBuilder.build(make_spec(name, **fields), tokenizer=tokenizer)


def _grads(agent: Any) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in agent._named_trainable().items()}


@pytest.mark.parametrize("fused", [False, True])
def test_packed_sequences_get_their_unpacked_log_probs(
    make_spec, make_env, tokenizer, fused: bool
) -> None:
    agent = _agent(make_spec, tokenizer, "DPO")
    env = make_env("preference")
    rows = env.train.rows[:6]
    padded = env.collate(rows)
    # wide rows, so that several pairs share one (the default caps rows at twice the longest)
    packed = pack_rows([r.prompt_ids for r in rows], [r.completions for r in rows], 0, capacity=256)
    with torch.no_grad():
        alone, alone_mask = sequence_logprobs(
            agent.actor, padded["input_ids"], padded["attention_mask"], padded["loss_mask"],
            fused=fused,
        )  # fmt: skip
        together, together_mask = packed_logprobs(agent.actor, packed, fused=fused)
    assert together.shape[0] == alone.shape[0] == 2 * len(rows)
    assert torch.equal(alone_mask.sum(-1), together_mask.sum(-1))
    # each sequence's response tokens, in order: the same values
    assert torch.allclose(alone[alone_mask.bool()], together[together_mask.bool()], atol=1e-5)
    assert packed["input_ids"].shape[0] < len(rows)
    assert padded_positions(packed)[1] < padded_positions(padded)[1]


@pytest.mark.parametrize("name", ["SFT", "DPO"])
def test_packed_loss_and_gradients_equal_the_unpacked_ones_with_fewer_padded_tokens(
    make_spec, make_env, tokenizer, name: str
) -> None:
    env = make_env("sft" if name == "SFT" else "preference")
    rows = env.train.rows[:8]
    out = {}
    for packing in (False, True):
        agent = _agent(make_spec, tokenizer, name, use_sequence_packing=packing)
        context = agent.prepare(rows, env)
        loss, metrics = agent.loss(rows, env, context, agent._norm(rows))
        loss.backward()
        out[packing] = (metrics, _grads(agent), agent.padding, agent.positions - agent.padding)
    (plain, plain_grads, plain_pad, plain_real) = out[False]
    (packed, packed_grads, packed_pad, packed_real) = out[True]
    for key, value in plain.items():  # DPO: rewards, margin, accuracy of the same pairs
        assert packed[key] == pytest.approx(value, abs=1e-5), key
    for key, grad in plain_grads.items():
        assert torch.allclose(grad, packed_grads[key], atol=1e-6, rtol=1e-4), key
    assert packed_real == plain_real
    if name == "DPO":  # SFT's sample rows are near one length: little padding to save
        assert packed_pad < plain_pad / 4


def test_packed_training_repeats_with_the_seed_and_reports_padding(
    make_spec, make_env, tokenizer
) -> None:
    env = make_env("preference")
    rows = env.train.rows[:6]
    runs = []
    for packing in (True, True, False):
        agent = _agent(
            make_spec, tokenizer, "DPO", use_sequence_packing=packing, micro_batch_size_per_gpu=3
        )
        runs.append([agent.learn(rows, env), agent.learn(rows[:3], env)])
    assert runs[0] == runs[1]
    for packed, padded in zip(runs[0], runs[2], strict=True):
        assert packed["loss"] == pytest.approx(padded["loss"], abs=1e-4)
        assert packed["tokens"] == padded["tokens"]
        assert packed["padded_tokens"] < padded["padded_tokens"]


class _LeakyAttention(torch.nn.Module):
    """A model that always passes a 2-D mask, so restarting positions do not isolate rows."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.model.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        kwargs["attention_mask"] = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, **kwargs)


def test_a_model_that_lets_packed_rows_attend_to_each_other_is_refused(
    make_spec, tokenizer
) -> None:
    agent = _agent(make_spec, tokenizer, "SFT")
    check_packing_isolates(agent.actor)  # the tiny Llama isolates them
    with pytest.raises(ConfigError, match="use_sequence_packing"):
        check_packing_isolates(_LeakyAttention(agent.actor))
