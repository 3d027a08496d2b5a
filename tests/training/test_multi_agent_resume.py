"""Multi-agent runs through LocalTrainer resume exactly: split runs equal uninterrupted ones.

Slow (three trainer runs each, about 10 s); the loop-level check runs by default in
tests/algorithms_ma/test_ma_resume.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.arena.models import TrainingManifest
from agilerl.trainer import LocalTrainer
from agilerl.training import multi_agent_runs

SMALL_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}
MUTATION = {
    "probabilities": {"no_mut": 0.2, "rl_hp_mut": 0.4, "arch_mut": 0.4},
    "rand_seed": 3,
}


def _manifest(algorithm: dict[str, Any], continuous: bool, **training: Any) -> TrainingManifest:
    data: dict[str, Any] = {
        "algorithm": algorithm,
        "environment": {
            "env_type": "pettingzoo",
            "name": "mpe2.simple_speaker_listener_v4",
            "num_envs": 2,
            "env_config": {"continuous_actions": continuous, "max_cycles": 25},
        },
        "network": SMALL_NET,
        "training": {
            "max_steps": 200,
            "evo_steps": 50,
            "pop_size": 2,
            "hpo": True,
            "eval_loop": 1,
            **training,
        },
        "mutation": MUTATION,
        "tournament_selection": {"tournament_size": 2, "elitism": True},
    }
    if algorithm["name"] != "IPPO":
        data["replay_buffer"] = {"max_size": 1000, "store_in_checkpoint": True}
    return TrainingManifest.from_dict(data)


def _train(manifest: TrainingManifest, run: Path, **options: Any) -> dict[str, Any]:
    LocalTrainer.from_manifest(
        manifest, run_dir=run, seed=5, verbose=False, logger={"tensorboard": False}, **options
    ).train()
    return json.loads((run / "summary.json").read_text())


def _metrics(run: Path) -> list[tuple[str, ...]]:
    columns = ("step", "generation", "agent", "fitness", "train_return")
    return [tuple(r[c] for c in columns) for r in csv.DictReader((run / "metrics.csv").open())]


def _final_agents(run: Path) -> list[dict[str, Any]]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return [torch.load(p, weights_only=True) for p in sorted(latest.glob("agent_*.pt"))]


def _assert_same_run(whole: Path, parts: Path) -> None:
    assert _metrics(parts) == _metrics(whole) and len(_metrics(whole)) == 8
    for a, b in zip(_final_agents(whole), _final_agents(parts), strict=True):
        assert (a["index"], a["steps"], a["spec"]) == (b["index"], b["steps"], b["spec"])
        assert a["fitness"] == b["fitness"] and a["scores"] == b["scores"]
        for name, net in a["networks"].items():
            for key, tensor in net.items():
                assert torch.equal(tensor, b["networks"][name][key]), (name, key)
    summary = json.loads((parts / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] == 400


@pytest.mark.slow
def test_matd3_run_resumed_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    algorithm = {"name": "MATD3", "batch_size": 16, "learn_step": 4, "expl_noise": 0.2}
    manifest = _manifest(algorithm, continuous=True, learning_delay=30)
    whole = tmp_path / "whole"
    _train(manifest, whole)
    parts = tmp_path / "parts"
    first = _train(_manifest(algorithm, continuous=True, learning_delay=30, max_steps=100), parts)
    assert first["status"] == "completed" and first["total_steps"] == 200
    latest = parts / "checkpoints" / (parts / "checkpoints" / "latest").read_text().strip()
    memory = torch.load(latest / "memory.pt", weights_only=True)["memories"][0]
    assert memory["size"] == 200
    _train(manifest, parts, resume=True)  # max_steps may grow on resume
    _assert_same_run(whole, parts)


@pytest.mark.slow
def test_ippo_run_stopped_mid_generation_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    algorithm = {"name": "IPPO", "learn_step": 50, "batch_size": 25, "update_epochs": 2}
    manifest = _manifest(algorithm, continuous=False)
    whole = tmp_path / "whole"
    _train(manifest, whole)

    def stop_at_rollout(run: Any, at: int = 7) -> Any:
        calls = [0]

        def check() -> str | None:  # 2 members x 1 rollout + 1 a generation: call 7 is in gen 3
            calls[0] += 1
            return "interrupted" if calls[0] >= at else None

        return check

    parts = tmp_path / "parts"
    with monkeypatch.context() as patch:
        patch.setattr(multi_agent_runs, "_should_stop", stop_at_rollout)
        stopped = _train(manifest, parts)
    assert stopped["status"] == "interrupted" and stopped["total_steps"] == 200
    assert len(_metrics(parts)) == 4  # the partial third generation was dropped
    _train(manifest, parts, resume=True)
    _assert_same_run(whole, parts)
