"""On a CUDA device: every RL paradigm trains end to end, its checkpoints load and resume on
the CPU, and one update computes what the same update computes on the CPU.

Marked ``gpu`` (not in the default suite); skipped where no CUDA device is visible.
``AGILERL_TEST_DEVICE=cpu`` runs the same checks with the CPU in the GPU's place, to check
the tests themselves on a machine without one.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.reliability.helpers import offline_dataset_override

DEVICE = os.environ.get("AGILERL_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device"
    ),
]
REPO = Path(__file__).resolve().parents[1]

# (algorithm, env): one of each family that trains through LocalTrainer
CASES = [
    ("ppo", "cartpole"),
    ("ppo", "pendulum"),
    ("dqn", "cartpole"),
    ("rainbow_dqn", "cartpole"),
    ("ddpg", "pendulum"),
    ("td3", "pendulum"),
    ("sac", "pendulum"),
    ("recurrent_ppo", "cartpole_novel"),
    ("ippo", "mpe_simple_speaker_listener"),
    ("maddpg", "mpe_simple_speaker_listener_continuous"),
    ("matd3", "mpe_simple_speaker_listener_continuous"),
    ("ippo", "mpe_simple_spread"),
    ("matd3", "mpe_simple_spread"),
    ("neural_ucb", "iris_bandit"),
    ("neural_ts", "iris_bandit"),
    ("cqn", "cartpole_offline"),
]
BUDGET = ("training.max_steps=2048", "training.evo_steps=1024", "training.checkpoint_steps=1024")


def _devices(agent) -> set[str]:
    found = set()
    for module in agent._networks().values():
        modules = module.values() if isinstance(module, dict) else [module]
        for m in modules:
            found |= {p.device.type for p in m.parameters()}
    return found


@pytest.mark.parametrize(("algorithm", "env"), CASES, ids=[f"{a}-{e}" for a, e in CASES])
def test_trains_on_cuda_and_resumes_on_cpu(
    train_composed, tmp_path: Path, algorithm: str, env: str
):
    data = (offline_dataset_override(tmp_path),) if env == "cartpole_offline" else ()
    overrides = (
        *data,
        f"algorithm={algorithm}",
        f"env={env}",
        "training=smoke",
        "hpo=evolutionary",
        "training.pop_size=2",
        "training.target_score=null",
    )
    run = tmp_path / "run"
    population, fitnesses = train_composed(run, *overrides, *BUDGET, seed=0, device=DEVICE)
    assert all(_devices(agent) == {DEVICE} for agent in population)
    assert all(math.isfinite(f) for f in fitnesses)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert rows and all(math.isfinite(float(r["fitness"])) for r in rows)

    # the CUDA run's checkpoint loads (weights_only) and trains on from the CPU
    more = ("training.max_steps=3072", "training.evo_steps=1024")
    population, fitnesses = train_composed(
        run, *overrides, *more, seed=0, device="cpu", resume=True
    )
    assert all(_devices(agent) == {"cpu"} for agent in population)
    assert all(math.isfinite(f) for f in fitnesses)
    assert json.loads((run / "summary.json").read_text())["total_steps"] >= 3072


def _batch(n: int, obs_dim: int, seed: int = 0, actions: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
        "action": rng.integers(0, actions, n).astype(np.int64),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
        "done": (rng.random(n) < 0.1).astype(np.float32),
    }


def test_dqn_update_on_cuda_equals_the_cpu_update() -> None:
    import gymnasium as gym

    from agilerl.algorithms import DQN
    from agilerl.arena.models import DQNSpec

    obs, act = gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2)
    spec = DQNSpec(batch_size=64, lr=1e-3)
    cpu = DQN(spec, obs, act, device="cpu")
    gpu = DQN(spec, obs, act, device=DEVICE)
    for name, module in cpu._networks().items():
        getattr(gpu, name).load_state_dict(module.state_dict())
    for step in range(5):
        batch = _batch(64, 4, seed=step)
        out_cpu, out_gpu = cpu.learn(batch), gpu.learn(batch)
        assert out_gpu["loss"] == pytest.approx(out_cpu["loss"], rel=1e-4, abs=1e-6)
    for name, module in cpu._networks().items():
        for (key, a), b in zip(
            module.state_dict().items(), getattr(gpu, name).state_dict().values(), strict=True
        ):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5, msg=f"{name}.{key}")


ROLLOUT = (
    "algorithm.batch_size=2",
    "algorithm.gradient_checkpointing=false",
    "algorithm.max_output_tokens=8",
    "training.evaluation_interval=2",
    "training.eval_samples_per_task=4",
)
DATASET = (
    "network.max_context_length=64",
    "algorithm.batch_size=4",
    "algorithm.gradient_checkpointing=false",
    "training.evaluation_interval=2",
)
LLM_CASES = {
    "grpo": ("experiment=grpo_countdown", *ROLLOUT),
    "llm_ppo": ("algorithm=llm_ppo", "env=llm_countdown", "network=llm_lora", *ROLLOUT),
    "llm_reinforce": ("algorithm=llm_reinforce", "env=llm_countdown", "network=llm_lora", *ROLLOUT),
    "sft": ("experiment=sft_chat", *DATASET),
    "dpo": ("experiment=dpo_preference", *DATASET),
}


@pytest.mark.llm
@pytest.mark.parametrize("algorithm", list(LLM_CASES))
def test_llm_trains_on_cuda_and_resumes_on_cpu(
    train_composed, tmp_path: Path, monkeypatch, algorithm: str
) -> None:
    pytest.importorskip("peft")
    from agilerl.llm.tiny import build_tiny_llm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    torch.set_num_threads(1)
    model = build_tiny_llm(tmp_path / "model")
    overrides = (
        *LLM_CASES[algorithm],
        f"network.pretrained_model_name_or_path={model}",
        "training.checkpoint_steps=2",
        "training.evo_steps=2",
    )
    run = tmp_path / "run"
    population, _ = train_composed(run, *overrides, "training.max_steps=2", seed=0, device=DEVICE)
    assert next(p for p in population[0].actor.parameters()).device.type == DEVICE
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] == 2
    population, _ = train_composed(
        run, *overrides, "training.max_steps=4", seed=0, device="cpu", resume=True
    )
    assert next(p for p in population[0].actor.parameters()).device.type == "cpu"
    assert population[0].num_updates == 4
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows][-2:] == [2, 4]
    assert all(math.isfinite(float(r["fitness"])) for r in rows)


@pytest.mark.llm
@pytest.mark.vllm
@pytest.mark.parametrize("mode", ["colocated", "async"])
def test_grpo_generates_with_vllm_on_cuda(
    train_composed, tmp_path: Path, monkeypatch, mode: str
) -> None:
    """CUDA vLLM (the official wheel: ``scripts/install_vllm.sh .venv-vllm cuda``), the
    adapter synced through files: colocated in the trainer, and in an engine process of its
    own generating a round ahead. Run there: ``.venv-vllm/bin/python -m pytest -m gpu``."""
    pytest.importorskip("vllm")
    from agilerl.llm.tiny import build_tiny_llm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    model = build_tiny_llm(tmp_path / "model")
    overrides = [
        *LLM_CASES["grpo"], f"network.pretrained_model_name_or_path={model}",
        "algorithm.use_vllm=true", "training.max_steps=4",
    ]  # fmt: skip
    if mode == "async":
        overrides += ["training.rollout_mode=async", "training.rollout_engines_per_agent=1"]
    run = tmp_path / "run"
    population, _ = train_composed(run, *overrides, seed=0, device=DEVICE)
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    rounds = list(csv.DictReader((run / "rewards.csv").open()))
    # colocated: a sync every round; async: the second round of each generation (two rounds
    # between evaluations) is generated during the first one's update, one round stale
    expected = [0, 0, 0, 0] if mode == "colocated" else [0, 1, 0, 1]
    updates = population[0].num_updates // 4
    assert [float(r["staleness"]) for r in rounds] == [e * updates for e in expected]
    assert all(float(r["tokens_per_second"]) > 0 for r in rounds)
