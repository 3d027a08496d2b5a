"""Peak memory and speed of LLM fine-tuning with each memory feature on and off.

Runs ``python train.py experiment=sft_chat`` on SmolLM2-135M-Instruct (after
``python scripts/fetch_smollm2.py``; ``--model`` takes any local folder) once per
configuration, for ``--batches`` batches of 16 rows, and records the process's peak
resident memory (``ru_maxrss`` of the finished run, model loading included) and the
seconds per batch (the run's wall time over its batches, one held-out evaluation
included). Writes ``benchmarks/llm_memory.md``::

    python scripts/bench/llm_memory.py
    python scripts/bench/llm_memory.py --model models/tiny-causal-lm --batches 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIGS: dict[str, tuple[str, ...]] = {
    "LoRA (defaults: fused log-probs, gradient checkpointing)": (),
    "LoRA, full logits (use_liger_loss=false)": ("algorithm.use_liger_loss=false",),
    "LoRA, no gradient checkpointing": ("algorithm.gradient_checkpointing=false",),
    "QLoRA nf4 (algorithm.quantization=nf4)": ("algorithm.quantization=nf4",),
    "QLoRA int8 (algorithm.quantization=int8)": ("algorithm.quantization=int8",),
}


def measure(model: str, batches: int, overrides: tuple[str, ...]) -> dict[str, float]:
    """One SFT run: peak RSS (MiB) and seconds per batch."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        args = [sys.executable, "train.py", "experiment=sft_chat",
                f"network.pretrained_model_name_or_path={model}",
                f"training.max_steps={batches}", f"training.evaluation_interval={batches}",
                "logger.tensorboard=false", f"run_dir={run}", *overrides]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(overrides)} failed:\n{process.stderr.read()[-2000:]}")
        summary = json.loads((run / "summary.json").read_text())
    return {
        "peak_mib": usage.ru_maxrss / 1024,
        "seconds_per_batch": summary["wall_seconds"] / summary["total_steps"],
        "held_out_loss": -float(summary["final_fitness"]),
    }


def main() -> None:
    from learning_table import commit, machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "llm_memory.md"))
    args = parser.parse_args()
    rows = []
    for label, overrides in CONFIGS.items():
        result = measure(args.model, args.batches, overrides)
        rows.append((label, result))
        print(f"{result['peak_mib']:8.0f} MiB  {result['seconds_per_batch']:6.1f} s/batch  "
              f"{label}", flush=True)  # fmt: skip
    base = rows[0][1]["peak_mib"]
    md = [
        f"# LLM fine-tuning memory: {Path(args.model).name}, SFT, CPU",
        "",
        f"`python scripts/bench/llm_memory.py --model {args.model} --batches {args.batches}`: "
        f"`train.py experiment=sft_chat` for {args.batches} batches of 16 rows (LoRA r=16 on every "
        "linear layer but the output), one process each. Peak RSS is the whole "
        "process's (Python, torch, the model load); seconds per batch include one held-out "
        "evaluation.",
        "",
        "| configuration | peak RSS (MiB) | vs LoRA defaults | s per batch | held-out loss |",
        "|---|---|---|---|---|",
    ]
    for label, r in rows:
        md.append(f"| {label} | {r['peak_mib']:.0f} | {r['peak_mib'] / base:.2f}x | "
                  f"{r['seconds_per_batch']:.1f} | {r['held_out_loss']:.3f} |")  # fmt: skip
    md += ["", f"Measured at {commit()} on {dt.date.today().isoformat()}, {machine()}.", ""]
    Path(args.out).write_text("\n".join(md))
    print(args.out)


if __name__ == "__main__":
    main()
