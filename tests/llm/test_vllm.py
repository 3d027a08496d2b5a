"""vLLM generation, colocated: the CPU build against HF generate, on the tiny model.

Run in the venv ``scripts/install_vllm.sh`` makes (``.venv-vllm/bin/python -m pytest -m vllm``);
skipped where vLLM is not installed.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from agilerl.builders.llm import LLMBuilder
from agilerl.training.llm.train_llm_rollout import train_llm_rollout
from tests.llm.test_grpo import rounds_to_target

pytestmark = [pytest.mark.llm, pytest.mark.vllm]
QV = {"lora_r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}
# LoRA on the output layer too: vLLM serves adapters, not a fully trained lm_head copy
QV_HEAD = {**QV, "target_modules": ["q_proj", "v_proj", "lm_head"]}


def _agent(make_rollout_spec: Any, tokenizer: Any, **fields: Any) -> Any:
    spec = make_rollout_spec("GRPO", lm_head=False, use_vllm=True, **fields)
    return LLMBuilder.build(spec, tokenizer=tokenizer)


def _hf(agent: Any, env: Any, rows: list[dict]) -> list[Any]:
    """The same rollout through HF generate (the agent's vLLM engine set aside)."""
    engine, agent.generator = agent.generator, None
    try:
        return agent.rollout(env, rows, greedy=True, group_size=1)
    finally:
        agent.generator = engine


def test_greedy_vllm_equals_hf_after_each_weight_sync(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = _agent(make_rollout_spec, left_tokenizer, lora_config=QV_HEAD, lr=5e-2)
    rows = digit_env.test
    first = [s.ids for s in _hf(agent, digit_env, rows)]
    changed = False
    for round_ in range(4):
        served = agent.rollout(digit_env, rows, greedy=True, group_size=1)
        reference = _hf(agent, digit_env, rows)
        assert [s.ids for s in served] == [s.ids for s in reference], round_
        changed |= [s.ids for s in reference] != first
        samples = agent.rollout(digit_env, digit_env.batch(round_, 4, 0))
        # vLLM's sampling log-probs against the trainer's recomputed ones (float32 on a CPU)
        gaps = [
            abs(trainer - sampler)
            for s in samples
            for trainer, sampler, generated in zip(
                s.old_logps, s.extra["sampler_logps"].tolist(), s.action_mask, strict=True
            )
            if generated
        ]
        assert max(gaps) < 1e-4
        agent.learn(samples)
    # the updates moved the greedy output, so the equality above held for synced adapters
    assert changed
    agent.generator.close()


def test_grpo_with_vllm_learns_the_digit_reward(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = _agent(make_rollout_spec, left_tokenizer, lora_config=QV_HEAD, lr=1e-3)
    reached, rewards = rounds_to_target(agent, digit_env, budget=25)
    agent.generator.close()
    assert rewards[0] < 0.3  # the untrained model's level (test_grpo's baseline too)
    assert reached is not None, rewards


def test_loop_records_versions_and_resumes_exactly(
    make_rollout_spec, digit_env, left_tokenizer, tmp_path: Path
) -> None:
    spec = make_rollout_spec(
        "GRPO", lm_head=False, use_vllm=True, lora_config=QV, group_size=4, batch_size=2,
        max_output_tokens=8,
    )  # fmt: skip
    kwargs = {"max_steps": 4, "evaluation_interval": 2, "weight_sync_interval": 2}
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([straight], digit_env, run_dir=tmp_path / "a", **kwargs)
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))
    # a sync every second round: the round after a sync's samples are one update stale
    assert [float(r["staleness"]) for r in rewards] == [0.0, 2.0, 0.0, 2.0]
    assert all(float(r["tokens_per_second"]) > 0 for r in rewards)

    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([first], digit_env, run_dir=tmp_path / "b", stop_after=2, **kwargs)
    second = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([second], digit_env, run_dir=tmp_path / "b", resume=True, **kwargs)
    resumed = list(csv.DictReader((tmp_path / "b" / "rewards.csv").open()))
    assert [r["reward"] for r in resumed] == [r["reward"] for r in rewards]
    a, b = straight.trainable_state(), second.trainable_state()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_readme_command_trains_with_vllm(tiny_model_dir: Path, tmp_path: Path) -> None:
    """README: ``train.py experiment=grpo_countdown algorithm.use_vllm=true``, a small budget."""
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable, str(repo / "train.py"), "experiment=grpo_countdown",
            "algorithm.use_vllm=true", f"network.pretrained_model_name_or_path={tiny_model_dir}",
            "training.max_steps=2", "training.evaluation_interval=2", "algorithm.batch_size=2",
            "algorithm.max_output_tokens=8", "logger.tensorboard=false", f"run_dir={tmp_path}",
        ],
        cwd=repo, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
    rounds = list(csv.DictReader((tmp_path / "rewards.csv").open()))
    assert [r["staleness"] for r in rounds] == ["0.0", "0.0"]  # a sync every round
