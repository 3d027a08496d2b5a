"""Benchmark: agilerl SFT/DPO versus TRL's SFTTrainer/DPOTrainer on the tiny model.

Both train the same LoRA adapter (r=8, alpha=16, all linear layers, no
dropout) on the same tiny Llama model, the same sample rows (data/), the same
train/test split, batch size, number of steps, learning rate (constant, AdamW
with weight decay 0.01), gradient clipping at 1.0, float32 and one torch thread. The
held-out metrics of both final models are computed by the same code
(agilerl's evaluation), so they compare like for like. Tokens/s counts the
prompt and completion tokens of the rows trained on (the same for both) per
second of training wall time.

TRL is not a dependency of agilerl; install it for this script only::

    pip install 'trl==1.16.0'
    python scripts/bench/llm_dataset_vs_trl.py [--sft-steps 30] [--dpo-steps 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch

from agilerl.arena.models.algorithms import DPOSpec, SFTSpec
from agilerl.arena.models.env import LLMEnvSpec
from agilerl.builders.llm import LLMBuilder, to_peft_lora
from agilerl.llm.datasets import load_dataset_env
from agilerl.llm.model import load_causal_lm, load_tokenizer
from agilerl.llm.tiny import build_tiny_llm

REPO = Path(__file__).resolve().parents[2]
LORA = {"lora_r": 8, "lora_alpha": 16, "target_modules": "all-linear", "lora_dropout": 0.0}
LR, MAX_LEN, SEED = 3e-3, 128, 0


def _spec(name: str, model: Path, batch: int) -> Any:
    common = {
        "pretrained_model_name_or_path": str(model),
        "lora_config": LORA,
        "batch_size": batch,
        "lr": LR,
        "max_model_len": MAX_LEN,
        "max_grad_norm": 1.0,
        "gradient_checkpointing": False,
        "seed": SEED,
    }
    if name == "SFT":
        return SFTSpec(**common)
    return DPOSpec(**common, beta=0.1, nll_alpha=0.0, use_separate_reference_adapter=False)


def _env(objective: str, tokenizer: Any) -> Any:
    path = "data/sft.jsonl" if objective == "sft" else "data/preference.jsonl"
    spec = LLMEnvSpec(env_type="dataset", objective=objective, dataset=path)
    return load_dataset_env(spec, tokenizer, max_model_len=MAX_LEN, seed=SEED, base_dir=REPO)


def _batches(env: Any, batch: int, steps: int) -> list[list[int]]:
    """Row indices of each step, in the order agilerl's loop takes them."""
    per_epoch = -(-len(env.train.rows) // batch)
    out = []
    for done in range(steps):
        epoch, cursor = divmod(done, per_epoch)
        out.append(env.order(epoch, SEED)[cursor * batch : (cursor + 1) * batch])
    return out


def _tokens(env: Any, batches: list[list[int]]) -> int:
    return sum(
        len(env.train.rows[i].prompt_ids) + sum(map(len, env.train.rows[i].completions))
        for b in batches
        for i in b
    )


def run_ours(name: str, model: Path, tokenizer: Any, env: Any, batch: int, steps: int) -> dict:
    algo = LLMBuilder.build(_spec(name, model, batch), tokenizer=tokenizer)
    batches = _batches(env, batch, steps)
    start = time.perf_counter()
    for rows in batches:
        algo.learn([env.train.rows[i] for i in rows], env)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": _tokens(env, batches),
        "eval": algo.evaluate(env.test.rows, env),
    }


def _trl_rows(env: Any, name: str, batches: list[list[int]]) -> list[dict]:
    """The rows agilerl trained on, in the same order, in TRL's conversational format."""
    rows = []
    for b in batches:
        for i in b:
            raw = env.raw_train[i]
            prompt = [{"role": "user", "content": raw["prompt"]}]
            if name == "SFT":
                completion = [{"role": "assistant", "content": raw["response"]}]
                rows.append({"prompt": prompt, "completion": completion})
            else:
                rows.append(
                    {
                        "prompt": prompt,
                        "chosen": [{"role": "assistant", "content": raw["chosen"]}],
                        "rejected": [{"role": "assistant", "content": raw["rejected"]}],
                    }
                )
    return rows


def run_trl(name: str, model_dir: Path, tokenizer: Any, env: Any, batch: int, steps: int) -> dict:
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    batches = _batches(env, batch, steps)
    data = Dataset.from_list(_trl_rows(env, name, batches))
    common = {
        "output_dir": tempfile.mkdtemp(prefix="trl-bench-"),
        "per_device_train_batch_size": batch,
        "max_steps": steps,
        "learning_rate": LR,
        "lr_scheduler_type": "constant",
        "weight_decay": 0.01,
        "max_grad_norm": 1.0,
        "logging_steps": steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "seed": SEED,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": False,
        "max_length": MAX_LEN,
        # TRL's configs default to bf16 autocast, even on CPU; agilerl trains in float32.
        "bf16": False,
    }
    lora = to_peft_lora(LORA)
    model = load_causal_lm(model_dir)
    if name == "SFT":
        args = SFTConfig(**common, completion_only_loss=True, packing=False)
        trainer = SFTTrainer(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=lora
        )
    else:
        args = DPOConfig(**common, beta=0.1, loss_type="sigmoid")
        trainer = DPOTrainer(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=lora
        )
    # Same row order as agilerl's loop: the rows are listed in training order.
    trainer._get_train_sampler = lambda *_args, **_kw: SequentialSampler(trainer.train_dataset)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    spec = _spec(name, model_dir, batch)
    algo = LLMBuilder.build(spec, tokenizer=tokenizer, actor_network=trainer.model)
    return {
        "seconds": seconds,
        "tokens": _tokens(env, batches),
        "eval": algo.evaluate(env.test.rows, env),
    }


def _line(label: str, result: dict, keys: tuple[str, ...]) -> str:
    tps = result["tokens"] / result["seconds"]
    metrics = ", ".join(f"{k} {result['eval'][k]:.4f}" for k in keys)
    return f"  {label:8s} {result['seconds']:7.2f} s  {tps:8.0f} tokens/s  held-out {metrics}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--dpo-steps", type=int, default=20)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--dpo-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="Alternating runs of each.")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = build_tiny_llm(Path(tempfile.mkdtemp(prefix="tiny-llm-")) / "model")
    tokenizer = load_tokenizer(model)
    for name, objective, steps, batch, keys in (
        ("SFT", "sft", args.sft_steps, args.sft_batch, ("loss",)),
        ("DPO", "preference", args.dpo_steps, args.dpo_batch, ("reward_margin", "reward_accuracy")),
    ):
        env = _env(objective, tokenizer)
        print(f"{name}: {steps} steps x {batch} rows, LoRA r=8 all-linear, lr {LR}, 1 thread")
        start = LLMBuilder.build(_spec(name, model, batch), tokenizer=tokenizer)
        print(f"  start    held-out {start.evaluate(env.test.rows, env)}")
        # Alternate the two so machine-load drift affects both alike; report the fastest run
        # of each (the held-out metrics do not depend on the repeat: same seeds).
        runs: dict[str, list[dict]] = {"agilerl": [], "trl": []}
        for _ in range(args.repeats):
            runs["agilerl"].append(run_ours(name, model, tokenizer, env, batch, steps))
            runs["trl"].append(run_trl(name, model, tokenizer, env, batch, steps))
        for label, results in runs.items():
            print(_line(label, min(results, key=lambda r: r["seconds"]), keys))


if __name__ == "__main__":
    main()
