"""Benchmark: agilerl GRPO (HF generate, vLLM colocated, vLLM async) versus TRL's GRPOTrainer.

Every side trains a LoRA adapter (r=8, alpha=16 on q and v, no dropout) and the output
layer (ours: a LoRA on ``lm_head`` too, since vLLM serves adapters only; TRL: a full copy
through ``modules_to_save``, since TRL refuses a LoRA on ``lm_head``) of the same model
on the same eight chat prompts, 4 prompts x 8 completions of up to 16 tokens per round,
temperature 1, no top-k, group-normalised advantages (mean and std), beta 0, two optimizer
steps per generation round (TRL's ``num_iterations``, our ``update_epochs``), AdamW lr
1e-3, clipping at 1.0, float32, one torch thread. The reward is the fraction of digit
characters in a completion.

Sides (``--sides``):

- ``agilerl-hf``: our rollout loop generating with HF ``generate``.
- ``agilerl-vllm``: the same loop with ``use_vllm`` (the engine in the trainer process,
  the adapter synced through files every round).
- ``agilerl-vllm-async``: ``rollout_mode: async``, one engine process generating the
  next round while the trainer learns from this one.
- ``trl``: TRL's GRPOTrainer generating with HF ``generate``.
- ``trl-vllm``: TRL with ``use_vllm=True, vllm_mode="colocate"`` (installed into the vLLM
  venv on demand); reported as failed with its error where it cannot run.

The vLLM sides run in the vLLM venv (``--vllm-python``, default ``.venv-vllm``, made by
``scripts/install_vllm.sh`` when missing): this script runs itself there for them.

Reported per side: completion tokens per second of round time and the median wall time
of a round (rounds 2 on: the first round of a vLLM side also starts its engine, shown
apart as ``start``), tokens per second over all rounds, and the first round whose 3-round
mean reward exceeds 0.8. A round's time is everything it costs: generation (for the
async side only the wait the update did not hide), any old-policy or reference pass,
the updates. TRL reports no per-round times: its rate is over its whole ``train()``.

``--model smollm2`` uses SmolLM2-135M-Instruct (``python scripts/fetch_smollm2.py`` first)::

    pip install -e '.[bench]'
    python scripts/bench/grpo_vs_trl.py [--rounds 25] [--model tiny|smollm2] [--sides ...]

Results with the command and the machine's load: ``benchmarks/grpo_vs_trl.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agilerl.arena.models.algorithms import GRPOSpec  # noqa: E402
from agilerl.arena.models.training import TrainingSpec  # noqa: E402
from agilerl.builders.llm import LLMBuilder  # noqa: E402
from agilerl.llm.model import load_tokenizer  # noqa: E402
from agilerl.llm.rewards import digit_fraction_reward  # noqa: E402
from agilerl.llm.rollout_env import PromptEpisode, RolloutEnv  # noqa: E402
from agilerl.llm.tiny import build_tiny_llm  # noqa: E402
from agilerl.training.llm.train_llm_rollout import EngineLayout, train_llm_rollout  # noqa: E402

PROMPTS = [
    "Write a number.",
    "Count to ten.",
    "What is 2 plus 2?",
    "Hello!",
    "Say something.",
    "Give me digits.",
    "What colour is the sky?",
    "Tell a story.",
]
GROUP, PROMPTS_PER_ROUND, MAX_NEW, LR, EPOCHS, SEED = 8, 4, 16, 1e-3, 2, 0
TARGETS = ["q_proj", "v_proj", "lm_head"]
LORA = {"lora_r": 8, "lora_alpha": 16, "target_modules": TARGETS, "lora_dropout": 0.0}
SMOLLM2 = REPO / "models" / "smollm2-135m-instruct"
VLLM_SIDES = ("agilerl-vllm", "agilerl-vllm-async", "trl-vllm")
SIDES = ("agilerl-hf", "agilerl-vllm", "agilerl-vllm-async", "trl", "trl-vllm")


def first_over(rewards: list[float], target: float = 0.8) -> int | None:
    """1-based round at which the 3-round mean reward first exceeds ``target``."""
    for i in range(2, len(rewards)):
        if sum(rewards[i - 2 : i + 1]) / 3 > target:
            return i + 1
    return None


def run_agilerl(model: Path, rounds: int, backend: str) -> dict[str, Any]:
    """Our rollout loop: ``hf``, ``vllm`` (colocated) or ``vllm-async``."""
    tokenizer = load_tokenizer(model, padding_side="left")
    spec = GRPOSpec(
        pretrained_model_name_or_path=str(model),
        lora_config=LORA,
        group_size=GROUP,
        batch_size=PROMPTS_PER_ROUND,
        lr=LR,
        beta=0.0,
        adv_norm="mean_std",
        temperature=1.0,
        top_k=0,
        max_output_tokens=MAX_NEW,
        max_model_len=256,
        update_epochs=EPOCHS,
        max_grad_norm=1.0,
        gradient_checkpointing=False,
        use_vllm=backend != "hf",
        seed=SEED,
    )
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    rows = [{"prompt": p} for p in PROMPTS]

    def episode(row: dict[str, Any]) -> PromptEpisode:
        messages = [{"role": "user", "content": row["prompt"]}]
        return PromptEpisode(messages, row, digit_fraction_reward)

    env = RolloutEnv(train=rows, test=rows, make_episode=episode, tokenizer=tokenizer)
    asynchronous = backend == "vllm-async"
    training = TrainingSpec(
        max_steps=rounds,
        evaluation_interval=rounds,
        eval_samples_per_task=1,
        rollout_mode="async" if asynchronous else "colocated",
        rollout_engines_per_agent=1 if asynchronous else 0,
    )
    layout = EngineLayout(engines=1, threads=1) if asynchronous else None
    with tempfile.TemporaryDirectory() as run_dir:
        start, cpu = time.perf_counter(), time.process_time()
        # One generation of `rounds` rounds: an async engine overlaps every round after the first.
        train_llm_rollout([agent], env, training=training, engine_layout=layout, run_dir=run_dir)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        table = list(csv.DictReader((Path(run_dir) / "rewards.csv").open()))
    seconds = [float(r["rollout_seconds"]) + float(r["learn_seconds"]) for r in table]
    tokens = [float(r["tokens_per_second"]) * float(r["rollout_seconds"]) for r in table]
    return {
        "rewards": [float(r["reward"]) for r in table],
        "tokens": sum(tokens),
        "wall": sum(seconds),
        "cpu": cpu,
        "steady_tokens": sum(tokens[1:]),
        "steady_wall": sum(seconds[1:]),
        "round": statistics.median(seconds[1:]),
        "start": seconds[0] - statistics.median(seconds[1:]),
        "staleness": max(float(r.get("staleness") or 0) for r in table),
        "whole_call": wall,
    }


def run_trl(model: Path, rounds: int, vllm: bool = False) -> dict[str, Any]:
    """TRL's GRPOTrainer (``vllm``: its colocated vLLM generation)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = load_tokenizer(model, padding_side="left")
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS] * (rounds + 1)
    )

    def reward(completions: list[Any], **_: Any) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [digit_fraction_reward(t, {}) for t in texts]

    extra: dict[str, Any] = {}
    if vllm:
        extra = {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.1,
            "vllm_enable_sleep_mode": False,
        }
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=GROUP * PROMPTS_PER_ROUND,
            num_generations=GROUP,
            max_completion_length=MAX_NEW,
            num_iterations=EPOCHS,
            max_steps=rounds * EPOCHS,
            learning_rate=LR,
            lr_scheduler_type="constant",
            beta=0.0,
            temperature=1.0,
            top_k=0,
            scale_rewards="group",
            max_grad_norm=1.0,
            gradient_checkpointing=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=SEED,
            dataloader_num_workers=0,
            disable_tqdm=True,
            **extra,
        )
        # TRL refuses a LoRA on lm_head (it computes log-probs from lm_head.weight): it
        # trains the output layer in full instead, as this benchmark did before vLLM.
        peft = LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
            modules_to_save=["lm_head"], task_type="CAUSAL_LM",
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32),
            reward_funcs=reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft,
        )
        start, cpu = time.perf_counter(), time.process_time()
        trainer.train()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    # only generation steps log a reward (num_iterations steps per round)
    per_round = [e for e in trainer.state.log_history if "reward" in e]
    rewards = [e["reward"] for e in per_round]
    tokens = sum(e["completions/mean_length"] * GROUP * PROMPTS_PER_ROUND for e in per_round)
    return {"rewards": rewards, "tokens": tokens, "wall": wall, "cpu": cpu}


def run_side(name: str, model: Path, rounds: int) -> dict[str, Any]:
    """One side, in this process."""
    torch.manual_seed(SEED)
    if name == "trl":
        return run_trl(model, rounds)
    if name == "trl-vllm":
        return run_trl(model, rounds, vllm=True)
    return run_agilerl(model, rounds, name.removeprefix("agilerl-"))


def vllm_python(path: str) -> str:
    """The vLLM venv's python, made by ``scripts/install_vllm.sh`` if it is missing."""
    python = Path(path)
    if not python.exists():
        venv = python.parent.parent
        print(f"making the vLLM venv {venv} (scripts/install_vllm.sh)", flush=True)
        subprocess.run(["bash", str(REPO / "scripts" / "install_vllm.sh"), str(venv)], check=True)
    return str(python)


def run_elsewhere(python: str, name: str, model: Path, rounds: int) -> dict[str, Any]:
    """One side in the vLLM venv (this script, ``--side``); a failure becomes its error."""
    if name == "trl-vllm":
        has_trl = subprocess.run([python, "-c", "import trl"], capture_output=True)
        if has_trl.returncode != 0:  # into the vLLM venv, keeping vLLM's transformers
            pin = subprocess.run(
                [python, "-c", "import transformers; print(transformers.__version__)"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            subprocess.run(
                [python, "-m", "pip", "install", "-q", "trl>=1.16", f"transformers=={pin}"],
                check=True,
            )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        done = subprocess.run(
            [python, __file__, "--side", name, "--model-dir", str(model),
             "--rounds", str(rounds), "--json", str(out)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0 or not out.exists():
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            return {"error": lines[-1] if lines else f"exit {done.returncode}"}
        return json.loads(out.read_text())


def report(name: str, r: dict[str, Any]) -> str:
    """One side's line."""
    if "error" in r:
        return f"{name:19s} failed: {r['error'][:200]}"
    line = f"{name:19s} tokens/s {r['tokens'] / r['wall']:7.1f}"
    if "round" in r:
        line += (
            f"  steady {r['steady_tokens'] / r['steady_wall']:7.1f}  round {r['round']:5.2f}s"
            f"  start {r['start']:5.1f}s"
        )
    else:
        line += f"  (whole train(): {r['wall']:.1f}s)"
    rewards = r["rewards"]
    return line + (
        f"  first {rewards[0]:.3f}  to 0.8 at round {first_over(rewards)}  final {rewards[-1]:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25, help="Generation rounds per side.")
    parser.add_argument(
        "--repeats", type=int, default=2, help="Runs per side, alternating; the fastest counts."
    )
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument(
        "--sides", default="agilerl-hf,agilerl-vllm,agilerl-vllm-async,trl",
        help=f"Comma-separated, of {', '.join(SIDES)}.",
    )  # fmt: skip
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one side, in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.side:
        result = run_side(args.side, Path(args.model_dir), args.rounds)
        Path(args.json).write_text(json.dumps(result))
        return
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        parser.error(f"unknown sides {unknown}; choose from {', '.join(SIDES)}")
    if args.model == "smollm2" and not (SMOLLM2 / "config.json").exists():
        parser.error(f"{SMOLLM2} is missing: run python scripts/fetch_smollm2.py first")
    python = vllm_python(args.vllm_python) if set(sides) & set(VLLM_SIDES) else None
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = SMOLLM2 if args.model == "smollm2" else build_tiny_llm(Path(tmp) / "model")
        results: dict[str, dict[str, Any]] = {}
        for repeat in range(args.repeats):
            # Alternate the order so a change in machine load hits every side alike.
            for name in sides if repeat % 2 == 0 else sides[::-1]:
                if "error" in results.get(name, {}):
                    continue
                if name in VLLM_SIDES:
                    r = run_elsewhere(str(python), name, model, args.rounds)
                else:
                    r = run_side(name, model, args.rounds)
                print(f"  run {repeat + 1}: {report(name, r)}", flush=True)
                if "error" in r:
                    results[name] = r
                    continue
                r["speed"] = (
                    r["steady_tokens"] / r["steady_wall"]
                    if "round" in r
                    else (r["tokens"] / r["wall"])
                )
                if name not in results or r["speed"] > results[name]["speed"]:
                    results[name] = r
    print(f"model {args.model}, {args.rounds} rounds, best of {args.repeats}:")
    for name in sides:
        print(report(name, results[name]))
    base = results.get("agilerl-hf")
    for name, r in results.items():
        if base is not None and name != "agilerl-hf" and "speed" in r:
            print(f"tokens/s {name} / agilerl-hf: {r['speed'] / base['speed']:.2f}x")


if __name__ == "__main__":
    main()
