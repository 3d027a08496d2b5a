"""Peak memory and speed of LLM fine-tuning with each memory feature on and off.

Runs ``python train.py experiment=sft_chat`` (or ``dpo_preference``) on
SmolLM2-135M-Instruct (after ``python scripts/fetch_smollm2.py``; ``--model``
takes any local folder) once per configuration, for ``--batches`` batches of 16
rows, and records the process's peak resident memory (``ru_maxrss`` of the
finished run, model loading included), the training tokens per second (the real
tokens of the batches over the run's wall time, one held-out evaluation
included) and the padding positions the forward passes computed per batch.
Configurations come in groups, each a section of ``benchmarks/llm_memory.md``;
running one group rewrites its section and keeps the others::

    python scripts/bench/llm_memory.py                  # every group
    python scripts/bench/llm_memory.py --group packing  # one section
    python scripts/bench/llm_memory.py --model models/tiny-causal-lm --batches 4
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

Config = tuple[str, tuple[str, ...]]
"""(experiment preset, overrides) of one measured run."""

GROUPS: dict[str, tuple[str, dict[str, Config]]] = {
    "settings": (
        "SFT, memory settings",
        {
            "LoRA (defaults: fused log-probs, gradient checkpointing)": ("sft_chat", ()),
            "LoRA, full logits (use_liger_loss=false)": (
                "sft_chat",
                ("algorithm.use_liger_loss=false",),
            ),
            "LoRA, no gradient checkpointing": (
                "sft_chat",
                ("algorithm.gradient_checkpointing=false",),
            ),
            "QLoRA nf4 (algorithm.quantization=nf4)": ("sft_chat", ("algorithm.quantization=nf4",)),
            "QLoRA int8 (algorithm.quantization=int8)": (
                "sft_chat",
                ("algorithm.quantization=int8",),
            ),
        },
    ),
    "packing": (
        "SFT and DPO, sequence packing",
        {
            "SFT, LoRA defaults": ("sft_chat", ()),
            "SFT, use_sequence_packing=true": (
                "sft_chat",
                ("algorithm.use_sequence_packing=true",),
            ),
            "DPO, LoRA defaults": ("dpo_preference", ()),
            "DPO, use_sequence_packing=true": (
                "dpo_preference",
                ("algorithm.use_sequence_packing=true",),
            ),
        },
    ),
    "chunks": (
        "SFT and DPO, log-probs in row chunks",
        {
            "SFT, LoRA defaults": ("sft_chat", ()),
            "SFT, chunk_rows=4": ("sft_chat", ("algorithm.chunk_rows=4",)),
            "SFT, full logits (use_liger_loss=false)": (
                "sft_chat",
                ("algorithm.use_liger_loss=false",),
            ),
            "SFT, full logits, chunk_rows=4": (
                "sft_chat",
                ("algorithm.use_liger_loss=false", "algorithm.chunk_rows=4"),
            ),
            "DPO, full logits (use_liger_loss=false)": (
                "dpo_preference",
                ("algorithm.use_liger_loss=false",),
            ),
            "DPO, full logits, chunk_rows=4": (
                "dpo_preference",
                ("algorithm.use_liger_loss=false", "algorithm.chunk_rows=4"),
            ),
        },
    ),
}


def measure(model: str, batches: int, experiment: str, overrides: tuple[str, ...]) -> dict:
    """One run: peak RSS (MiB), tokens per second, padding per batch, held-out loss."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        args = [sys.executable, "train.py", f"experiment={experiment}",
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
        with (run / "metrics.csv").open() as handle:
            logged = list(csv.DictReader(handle))[-1]
    steps = summary["total_steps"]
    return {
        "peak_mib": usage.ru_maxrss / 1024,
        "seconds_per_batch": summary["wall_seconds"] / steps,
        "tokens_per_second": float(logged["train_tokens"]) * steps / summary["wall_seconds"],
        "padding_per_batch": float(logged["train_padded_tokens"]),
        "held_out_loss": float(logged["loss"]),
    }


def section(name: str, model: str, batches: int, rows: list[tuple[str, dict]]) -> str:
    """The markdown section of one group's results."""
    from learning_table import commit, machine

    title, _ = GROUPS[name]
    base = rows[0][1]["peak_mib"]
    lines = [
        f"<!-- group: {name} -->",
        f"## {title}",
        "",
        f"`python scripts/bench/llm_memory.py --group {name} --model {model} "
        f"--batches {batches}`, {batches} batches of 16 rows each.",
        "",
        f"| configuration | peak RSS (MiB) | vs {rows[0][0]} | s per batch | tokens/s "
        "| padded positions per batch | held-out loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| {label} | {r['peak_mib']:.0f} | {r['peak_mib'] / base:.2f}x | "
            f"{r['seconds_per_batch']:.1f} | {r['tokens_per_second']:.0f} | "
            f"{r['padding_per_batch']:.0f} | {r['held_out_loss']:.3f} |"
        )
    lines += ["", f"Measured at {commit()} on {dt.date.today().isoformat()}, {machine()}.", ""]
    return "\n".join(lines)


def write(out: Path, model: str, sections: dict[str, str]) -> None:
    """Rewrite ``out`` with the new ``sections``, keeping the other groups' sections."""
    kept: dict[str, str] = {}
    if out.exists():
        parts = re.split(r"(?m)^<!-- group: (\w+) -->\n", out.read_text())
        for name, text in zip(parts[1::2], parts[2::2], strict=True):
            kept[name] = f"<!-- group: {name} -->\n{text}"
    kept.update(sections)
    header = [
        f"# LLM fine-tuning memory: {Path(model).name}, CPU",
        "",
        "`train.py experiment=sft_chat` (or `dpo_preference`), LoRA r=16 on every linear "
        "layer but the output, one process per configuration. Peak RSS is the whole "
        "process's (Python, torch, the model load); seconds per batch and tokens/s (real "
        "tokens, padding excluded) include one held-out evaluation; padded positions are "
        "the padding the training forward passes computed.",
        "",
    ]
    body = [kept[name].rstrip("\n") + "\n" for name in GROUPS if name in kept]
    out.write_text("\n".join([*header, *body]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--group", choices=[*GROUPS, "all"], default="all")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "llm_memory.md"))
    args = parser.parse_args()
    sections = {}
    for name in GROUPS if args.group == "all" else [args.group]:
        rows = []
        for label, (experiment, overrides) in GROUPS[name][1].items():
            result = measure(args.model, args.batches, experiment, overrides)
            rows.append((label, result))
            print(f"{result['peak_mib']:8.0f} MiB  {result['seconds_per_batch']:6.1f} s/batch  "
                  f"{result['tokens_per_second']:6.0f} tok/s  {label}", flush=True)  # fmt: skip
        sections[name] = section(name, args.model, args.batches, rows)
    write(Path(args.out), args.model, sections)
    print(args.out)


if __name__ == "__main__":
    main()
