"""vLLM generation, colocated and asynchronous: the CPU build against HF generate, tiny model.

Run in the venv ``scripts/install_vllm.sh`` makes (``.venv-vllm/bin/python -m pytest -m vllm``);
skipped where vLLM is not installed.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from agilerl.arena.models.training import TrainingSpec
from agilerl.builders.llm import LLMBuilder
from agilerl.llm import async_engines
from agilerl.training.llm.train_llm_rollout import RolloutMembers, train_llm_rollout
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


def test_vllm_completions_stay_within_max_model_len(make_rollout_spec, left_tokenizer) -> None:
    from agilerl.llm.generation import SamplingSettings

    agent = _agent(make_rollout_spec, left_tokenizer, lora_config=QV)
    tok = left_tokenizer
    short, long = tok("Hi")["input_ids"], tok("Count to ten, then back to one.")["input_ids"]
    limit = len(long)
    settings = SamplingSettings(max_new_tokens=16, min_new_tokens=16, max_model_len=limit)
    agent.generator.serve(agent)
    out = agent.generator(None, tok, [short, long, long[:-2]], settings)
    assert len(short) + len(out[0].ids) == limit  # capped by the context, not max_new_tokens
    assert out[1].ids == []  # the prompt fills the context: nothing reaches the engine
    assert len(out[2].ids) == 2
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
    kwargs = {"training": TrainingSpec(max_steps=4, evaluation_interval=2, weight_sync_interval=2)}
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([straight], digit_env, run_dir=tmp_path / "a", **kwargs)
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))
    # a sync every second round: the round after a sync's samples are one update stale
    assert [float(r["staleness"]) for r in rewards] == [0.0, 2.0, 0.0, 2.0]
    assert all(float(r["tokens_per_second"]) > 0 for r in rewards)

    # Stopped after round 0, between syncs: the checkpoint carries the served adapter, so
    # the resumed run samples round 1 with v0 (not the live weights), as the straight one did.
    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([first], digit_env, run_dir=tmp_path / "b", stop_after=1, **kwargs)
    second = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([second], digit_env, run_dir=tmp_path / "b", resume=True, **kwargs)
    resumed = list(csv.DictReader((tmp_path / "b" / "rewards.csv").open()))
    assert [r["reward"] for r in resumed] == [r["reward"] for r in rewards]
    assert [r["weight_version"] for r in resumed] == [r["weight_version"] for r in rewards]
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


def _async_spec(make_rollout_spec: Any) -> Any:
    return make_rollout_spec(
        "GRPO", lm_head=False, use_vllm=True, lora_config=QV, group_size=4, batch_size=2,
        max_output_tokens=8,
    )  # fmt: skip


def test_async_engine_generates_ahead_with_bounded_staleness_and_resumes_exactly(
    make_rollout_spec, digit_env, left_tokenizer, tmp_path: Path, monkeypatch
) -> None:
    spec = _async_spec(make_rollout_spec)
    training = TrainingSpec(
        max_steps=4, evaluation_interval=4, rollout_mode="async", rollout_engines_per_agent=1
    )
    kwargs = {"training": training}
    straight = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    train_llm_rollout([straight], digit_env, run_dir=tmp_path / "a", **kwargs)
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))
    # Round 1 is generated on demand; each later one while the previous round is learnt
    # from, by the version published before that update: one round (2 updates) stale.
    assert [float(r["staleness"]) for r in rewards] == [0.0, 2.0, 2.0, 2.0]
    assert [float(r["weight_version"]) for r in rewards] == [0.0, 0.0, 2.0, 4.0]

    def resumed_equals_straight(run: Path) -> None:
        again = LLMBuilder.build(spec, tokenizer=left_tokenizer)
        train_llm_rollout([again], digit_env, run_dir=run, resume=True, **kwargs)
        resumed = list(csv.DictReader((run / "rewards.csv").open()))
        for column in ("reward", "weight_version", "staleness"):
            assert [r[column] for r in resumed] == [r[column] for r in rewards], column
        a, b = straight.trainable_state(), again.trainable_state()
        assert all(torch.equal(a[k], b[k]) for k in a)

    # A stop after round 2, with round 3 generated ahead: the checkpoint carries it.
    first = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    part = train_llm_rollout([first], digit_env, run_dir=tmp_path / "b", stop_after=2, **kwargs)
    assert part.status == "interrupted"
    resumed_equals_straight(tmp_path / "b")

    # The engine dies while round 2 is generated ahead (killed during round 1's update), with
    # no restarts allowed: the run fails after checkpointing round 2 as owed, and the resumed
    # run generates it with the adapter the straight run used.
    original = RolloutMembers.learn

    def learn_and_kill(self: Any, agent: Any, *args: Any) -> Any:
        if agent.batches == 1:
            pid = agent.generator.pids[0]
            os.kill(pid, signal.SIGKILL)
            agent.generator.engines[0].process.join(30)
        return original(self, agent, *args)

    monkeypatch.setattr(async_engines, "MAX_RESTARTS", 0)
    monkeypatch.setattr(RolloutMembers, "learn", learn_and_kill)
    third = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    with pytest.raises(async_engines.EngineDied, match="died"):
        train_llm_rollout([third], digit_env, run_dir=tmp_path / "c", **kwargs)
    latest = (tmp_path / "c" / "checkpoints" / "latest").read_text().strip()
    state = torch.load(tmp_path / "c" / "checkpoints" / latest / "state.pt", weights_only=True)
    assert state["total_steps"] == 2
    monkeypatch.undo()
    resumed_equals_straight(tmp_path / "c")


def test_a_killed_engine_process_is_restarted_then_the_run_stops(
    make_rollout_spec, digit_env, left_tokenizer
) -> None:
    agent = LLMBuilder.build(_async_spec(make_rollout_spec), tokenizer=left_tokenizer)
    engine = async_engines.AsyncVLLMGenerator(agent.spec, engines=1)
    agent.generator.close()
    agent.generator = engine
    try:
        rows = digit_env.test[:2]
        before = [s.ids for s in agent.rollout(digit_env, rows, greedy=True, group_size=1)]
        for restarts in range(1, async_engines.MAX_RESTARTS + 1):
            os.kill(engine.pids[0], signal.SIGKILL)
            again = [s.ids for s in agent.rollout(digit_env, rows, greedy=True, group_size=1)]
            assert again == before and engine._engines[0].restarts == restarts
        os.kill(engine.pids[0], signal.SIGKILL)
        with pytest.raises(async_engines.EngineDied, match="restarted 2 times already"):
            agent.rollout(digit_env, rows, greedy=True, group_size=1)
    finally:
        engine.close()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_the_readme_async_command_survives_sigkill_and_resumes_exactly(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """README: ``... training.rollout_mode=async training.rollout_engines_per_agent=1``."""
    repo = Path(__file__).resolve().parents[2]

    def command(run: Path) -> list[str]:
        return [
            sys.executable, str(repo / "train.py"), "experiment=grpo_countdown",
            "algorithm.use_vllm=true", "training.rollout_mode=async",
            "training.rollout_engines_per_agent=1",
            f"network.pretrained_model_name_or_path={tiny_model_dir}",
            "training.max_steps=4", "training.evaluation_interval=2", "algorithm.batch_size=2",
            "algorithm.max_output_tokens=8", "logger.tensorboard=false", f"run_dir={run}",
        ]  # fmt: skip

    straight = subprocess.run(
        command(tmp_path / "a"), cwd=repo, capture_output=True, text=True, timeout=600
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    rewards = list(csv.DictReader((tmp_path / "a" / "rewards.csv").open()))
    # the second round of each generation is generated during the first one's update
    assert [r["staleness"] for r in rewards] == ["0.0", "1.0", "0.0", "1.0"]

    run = tmp_path / "b"
    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen(command(run), cwd=repo, stdout=log, stderr=subprocess.STDOUT)
    engines: list[int] = []
    deadline = time.monotonic() + 600
    while not (run / "checkpoints" / "latest").exists() and time.monotonic() < deadline:
        engines = engines or _children(proc.pid)
        time.sleep(0.05)
    assert engines, "the async run started no engine process"
    proc.kill()
    proc.wait()
    log.close()
    # the engine notices its trainer is gone and exits (no orphan keeps the CPUs busy)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in engines) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in engines)
    done = subprocess.run(
        [sys.executable, str(repo / "train.py"), f"resume={run}"],
        cwd=repo, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    resumed = list(csv.DictReader((run / "rewards.csv").open()))
    for column in ("reward", "weight_version", "staleness"):
        assert [r[column] for r in resumed] == [r[column] for r in rewards], column
