"""``torchrun --nproc_per_node=2 train.py experiment=grpo_countdown`` end to end (gloo on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONPATH": str(REPO),
}


def _torchrun(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(REPO / "train.py"),
        *overrides,
    ]
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)


def _latest_agent(run_dir: Path) -> dict:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return torch.load(run_dir / "checkpoints" / latest / "agent_0.pt", weights_only=True)


@pytest.mark.llm
@pytest.mark.slow
def test_torchrun_train_py_one_run_dir_and_fsdp_matches_replicated(
    tiny_model_dir: Path, left_tokenizer, tmp_path: Path
) -> None:
    """Rank 0 alone names and writes the run; the FSDP2 checkpoint loads into one process."""
    from agilerl.arena.models.algorithms import GRPOSpec
    from agilerl.builders.llm import LLMBuilder

    overrides = (
        "experiment=grpo_countdown",
        f"environment.dataset={REPO / 'data' / 'countdown.jsonl'}",
        "environment.reward=digit_fraction",  # a dense reward, so the two rounds update
        f"network.pretrained_model_name_or_path={tiny_model_dir}",
        "network.lora_config.lora_dropout=0",
        "algorithm.lr=0.01",
        "algorithm.batch_size=2",  # the global batch: one prompt group per process
        "algorithm.max_output_tokens=8",
        "training.max_steps=2",
        "training.evaluation_interval=2",
        "training.eval_samples_per_task=4",
        "training.checkpoint_steps=2",
        "algorithm.use_liger_loss=false",  # both from the logits, as a sharded run computes
    )
    replicated = _torchrun(tmp_path, *overrides)  # Hydra's default, time-stamped run name
    assert replicated.returncode == 0, replicated.stderr[-3000:]
    runs = [p for p in (tmp_path / "runs").glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs  # rank 1's own Hydra dir was not used, and is gone
    run_a = runs[0]
    assert len(list(run_a.glob("summary.json"))) == 1
    assert (run_a / "rewards.csv").read_text().count("\n") == 3  # header + 2 rounds, once

    # float32 parameters (the default is bfloat16), so the sharded run's numbers are the
    # replicated run's
    fsdp = "algorithm.fsdp={param_dtype:float32}"
    sharded = _torchrun(tmp_path, *overrides, fsdp, f"run_dir={tmp_path / 'b'}")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    a, b = _latest_agent(run_a), _latest_agent(tmp_path / "b")
    assert set(a["trainable"]) == set(b["trainable"])
    moved = max(float(v["exp_avg"].abs().max()) for v in b["optimizer"]["state"].values())
    assert moved > 0  # the rounds updated the adapter
    for name, tensor in a["trainable"].items():
        torch.testing.assert_close(b["trainable"][name], tensor, atol=1e-5, rtol=1e-4)
    assert set(b["optimizer"]["state"]) == set(a["optimizer"]["state"])

    # A sharded resume loads the whole checkpoint back into shards (optimizer steps go on).
    resumed = _torchrun(tmp_path, "training.max_steps=3", f"resume={tmp_path / 'b'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    step_3 = _latest_agent(tmp_path / "b")
    assert step_3["num_updates"] == 3
    assert all(float(v["step"]) == 3 for v in step_3["optimizer"]["state"].values())

    # The gathered FSDP checkpoint loads into an unsharded, one-process agent.
    agent = LLMBuilder.build(GRPOSpec.model_validate(b["spec"]), tokenizer=left_tokenizer)
    agent.load_checkpoint_state(b)
    for name, tensor in agent.trainable_state().items():
        torch.testing.assert_close(tensor, b["trainable"][name])


def test_a_single_process_paradigm_refuses_several_processes(tmp_path: Path) -> None:
    env = {**ENV, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "algorithm=ppo", "env=cartpole"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "runs in one process" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("manifest.yaml"))
