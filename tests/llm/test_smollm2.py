"""Smoke test on a real pretrained model: SmolLM2-135M-Instruct from scripts/fetch_smollm2.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agilerl.builders.llm import LLMBuilder

pytestmark = [pytest.mark.llm, pytest.mark.slow]
SMOLLM = Path(__file__).resolve().parents[2] / "models" / "smollm2-135m-instruct"
LORA = {"lora_r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}


@pytest.fixture(scope="module")
def smollm_dir() -> Path:
    if not (SMOLLM / "model.safetensors").is_file():
        pytest.skip("run python scripts/fetch_smollm2.py to cache SmolLM2-135M-Instruct")
    return SMOLLM


def test_smollm2_answers_and_one_sft_and_dpo_step_change_only_lora(smollm_dir: Path) -> None:
    from agilerl.arena.models.algorithms import DPOSpec, SFTSpec
    from agilerl.llm.datasets import TokenisedRow, render_prompt
    from agilerl.llm.model import load_tokenizer

    tokenizer = load_tokenizer(smollm_dir)
    common = {
        "pretrained_model_name_or_path": str(smollm_dir),
        "lora_config": LORA,
        "batch_size": 2,
        "lr": 1e-4,
        "max_model_len": 256,
        "gradient_checkpointing": True,
        "seed": 0,
    }
    sft = LLMBuilder.build(SFTSpec(**common), tokenizer=tokenizer)
    answer = sft.generate(["What is 7 + 5?"], max_new_tokens=24)[0]
    assert "12" in answer, answer

    def row(prompt: str, *completions: str) -> TokenisedRow:
        ids = tokenizer(
            render_prompt(tokenizer, [{"role": "user", "content": prompt}]),
            add_special_tokens=False,
        )["input_ids"]
        done = [
            [*tokenizer(c, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
            for c in completions
        ]
        return TokenisedRow(prompt_ids=ids, completions=done)

    from agilerl.llm.datasets import LLMDatasetEnv

    def env(rows: list[TokenisedRow], objective: str) -> LLMDatasetEnv:
        from agilerl.llm.datasets import DatasetSplit

        split = DatasetSplit(rows=rows)
        return LLMDatasetEnv(objective, split, split, tokenizer.pad_token_id)

    def check_step(algo, rows, objective) -> None:
        before = {n: p.detach().clone() for n, p in algo.actor.named_parameters()}
        algo.learn(rows, env(rows, objective))
        changed = {n for n, p in algo.actor.named_parameters() if not torch.equal(p, before[n])}
        assert changed and all("lora_" in n for n in changed)

    check_step(sft, [row("What is 2 + 2?", "4"), row("What is 3 + 3?", "6")], "sft")
    dpo = LLMBuilder.build(
        DPOSpec(**common, use_separate_reference_adapter=False),
        tokenizer=tokenizer,
        actor_network=sft.actor,
    )
    check_step(
        dpo,
        [row("What is 2 + 2?", "4", "5"), row("What is 3 + 3?", "6", "7")],
        "preference",
    )


def test_one_grpo_round_on_smollm2_changes_only_lora(smollm_dir: Path) -> None:
    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.llm.model import load_tokenizer
    from agilerl.llm.rewards import numeric_reward
    from agilerl.llm.rollout_env import PromptEpisode, RolloutEnv

    tokenizer = load_tokenizer(smollm_dir, padding_side="left")
    spec = GRPOSpec(
        pretrained_model_name_or_path=str(smollm_dir),
        lora_config=LORA,
        group_size=2,
        batch_size=2,
        lr=1e-4,
        beta=0.01,
        max_output_tokens=8,
        max_model_len=256,
        gradient_checkpointing=True,
        seed=0,
    )
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    rows = [
        {"question": "What is 7 + 5?", "answer": 12},
        {"question": "What is 3 + 4?", "answer": 7},
    ]

    def episode(row: dict) -> PromptEpisode:
        messages = [{"role": "user", "content": row["question"]}]
        return PromptEpisode(messages, row, numeric_reward)

    env = RolloutEnv(train=rows, test=rows, make_episode=episode, tokenizer=tokenizer)
    before = {n: p.detach().clone() for n, p in agent.actor.named_parameters()}
    samples = agent.rollout(env, rows)
    samples[0].reward, samples[1].reward = 1.0, 0.0  # a group with signal whatever was sampled
    metrics = agent.learn(samples)
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    changed = {n for n, p in agent.actor.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n and ".default." in n for n in changed)
