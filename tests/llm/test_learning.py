"""SFT and DPO learn on the tiny model (fixed seeds, one thread)."""

from __future__ import annotations

import pytest
import torch

from agilerl.arena.models.training import TrainingSpec
from agilerl.builders.llm import LLMBuilder
from agilerl.training.llm.train_llm_dataset import train_llm_dataset

pytestmark = pytest.mark.llm


def test_sft_held_out_loss_falls_and_only_lora_changes(make_spec, make_env, tokenizer) -> None:
    env = make_env("sft")
    algo = LLMBuilder.build(make_spec("SFT", batch_size=8), tokenizer=tokenizer)
    before = algo.evaluate(env.test.rows, env)["loss"]
    weights = {n: p.detach().clone() for n, p in algo.actor.named_parameters()}
    train_llm_dataset([algo], env, training=TrainingSpec(max_steps=30, evaluation_interval=30))
    after = algo.evaluate(env.test.rows, env)["loss"]
    assert after <= 0.7 * before, (before, after)
    changed = {n for n, p in algo.actor.named_parameters() if not torch.equal(p, weights[n])}
    assert changed and all("lora_" in n for n in changed)
    assert len(changed) == sum("lora_" in n for n in weights)


def test_sft_memorises_an_answer(make_spec, make_env, tokenizer) -> None:
    env = make_env("sft")
    row_index = next(i for i, r in enumerate(env.raw_train) if "colour" in r["prompt"])
    raw, row = env.raw_train[row_index], env.train.rows[row_index]
    algo = LLMBuilder.build(make_spec("SFT", lr=5e-3), tokenizer=tokenizer)
    assert algo.generate([raw["prompt"]])[0] != raw["response"]
    for _ in range(25):
        algo.learn([row] * 4, env)
    assert algo.generate([raw["prompt"]])[0] == raw["response"]


def test_dpo_reward_accuracy_and_margin_on_held_out_pairs(make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    algo = LLMBuilder.build(make_spec("DPO", batch_size=4), tokenizer=tokenizer)
    start = algo.evaluate(env.test.rows, env)
    assert start["reward_margin"] == pytest.approx(0.0, abs=1e-6)
    train_llm_dataset([algo], env, training=TrainingSpec(max_steps=12, evaluation_interval=12))
    end = algo.evaluate(env.test.rows, env)
    assert end["reward_margin"] > 0
    assert end["reward_accuracy"] >= 0.9
    assert end["loss"] < start["loss"]
