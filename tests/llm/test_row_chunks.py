"""chunk_rows: log-probs computed a few rows at a time equal the whole-batch ones, gradients too."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agilerl.builders.llm import LLMBuilder
from agilerl.llm.row_chunks import cat_right_aligned, row_slices

pytestmark = pytest.mark.llm


def test_row_slices_and_right_aligned_join() -> None:
    assert row_slices(5, None) == [slice(0, 5)]
    assert row_slices(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    joined = cat_right_aligned([torch.ones(2, 3), torch.full((1, 1), 2.0)], 3)
    assert joined.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 2]]


def _forward_rows_seen(agent: Any) -> list[int]:
    """Rows of every forward pass the agent's model runs from now on."""
    seen: list[int] = []

    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        seen.append(int(kwargs["input_ids"].shape[0]))

    agent.actor.get_base_model().register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def _trainable_grads(agent: Any, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    params = dict(agent._named_trainable())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {n: g for n, g in zip(params, grads, strict=True) if g is not None}


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("SFT", {"use_liger_loss": False}),
        ("DPO", {"use_sequence_packing": True, "gradient_checkpointing": True}),
    ],
)
def test_dataset_log_probs_and_gradients_equal_in_row_chunks(
    make_spec, make_env, tokenizer, name: str, fields: dict[str, Any]
) -> None:
    env = make_env("sft" if name == "SFT" else "preference")
    rows = env.train.rows[:8]
    out = {}
    for chunk_rows in (None, 3):
        agent = LLMBuilder.build(
            make_spec(name, chunk_rows=chunk_rows, **fields), tokenizer=tokenizer
        )
        agent.actor.train()
        seen = _forward_rows_seen(agent)
        context = agent.prepare(rows, env)
        logps, mask = agent._logps(agent._collate(rows, env))
        loss, _ = agent.loss(rows, env, context, agent._norm(rows))
        out[chunk_rows] = (logps.detach(), mask, _trainable_grads(agent, loss), context)
        assert max(seen) <= (chunk_rows or 100) and (chunk_rows is None or len(seen) > 3)
    assert torch.allclose(out[None][0], out[3][0], atol=1e-5)
    assert torch.equal(out[None][1], out[3][1])
    for key, value in out[None][3].items():  # DPO's reference pass (no gradients)
        assert torch.allclose(value, out[3][3][key], atol=1e-5), key
    assert out[None][2].keys() == out[3][2].keys() and out[3][2]
    for key, grad in out[None][2].items():
        assert torch.allclose(grad, out[3][2][key], atol=1e-6, rtol=1e-4), key


@pytest.mark.parametrize("hidden", [False, True])
def test_rollout_log_probs_and_gradients_equal_in_row_chunks(
    make_rollout_spec, digit_env, left_tokenizer, hidden: bool
) -> None:
    agents = {
        size: LLMBuilder.build(
            make_rollout_spec("GRPO", group_size=2, chunk_rows=size), tokenizer=left_tokenizer
        )
        for size in (None, 3)
    }
    torch.manual_seed(0)
    samples = agents[None].rollout(digit_env, digit_env.batch(0, 4, 0))
    keep = max(len(s.ids) for s in samples) - 1
    out = {}
    for size, agent in agents.items():
        seen = _forward_rows_seen(agent)
        logps, states = agent._forward_rows(samples, hidden=hidden, keep=keep)
        assert max(seen) == (size or len(samples))  # prefixes run once per group, then rows
        total = logps.sum() + (states.sum() if hidden else 0.0)
        out[size] = (logps.detach(), states, _trainable_grads(agent, total))
        with torch.no_grad():  # the prefix-sharing path (reference and old log-probs)
            out[size] += (agent._forward_rows(samples, keep=keep)[0],)
    assert out[None][0].shape == out[3][0].shape == (len(samples), keep)
    assert torch.allclose(out[None][0], out[3][0], atol=1e-5)
    assert torch.allclose(out[None][3], out[3][3], atol=1e-5)
    if hidden:
        assert torch.allclose(out[None][1], out[3][1], atol=1e-5)
    for key, grad in out[None][2].items():  # relative to the gradient's size
        assert (grad - out[3][2][key]).norm() <= 1e-4 * grad.norm() + 1e-7, key
