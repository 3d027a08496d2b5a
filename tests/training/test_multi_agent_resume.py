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
from agilerl.training.population_loop import PopulationLoop
from tests.algorithms_ma.ma_helpers import stop_at_call

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


def _metrics(run: Path) -> list[dict[str, str]]:
    """Every metrics.csv column but the wall time (losses and hyperparameters included)."""
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    for row in rows:
        row.pop("wall_seconds")
    return rows


def test_run_directory_has_the_single_agent_columns_and_the_lineage(tmp_path: Path) -> None:
    """metrics.csv as the README lists it (wall time, eval std and episodes, losses,
    live hyperparameters) plus per-agent fitness, and hpo.csv for an evolving population."""
    torch.set_num_threads(1)
    algorithm = {"name": "MATD3", "batch_size": 16, "learn_step": 4}
    run = tmp_path / "run"
    _train(_manifest(algorithm, continuous=True, learning_delay=30), run)
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert len(rows) == 8
    for column in (
        "agent_steps",
        "wall_seconds",
        "eval_std",
        "eval_episodes",
        "critic_loss",
        "actor_loss",
        "hp_lr_actor",
        "hp_batch_size",
        "fitness_speaker_0",
        "fitness_listener_0",
    ):
        assert column in rows[0], column
    assert all(float(r["critic_loss"]) >= 0 and int(r["eval_episodes"]) == 2 for r in rows)
    assert [int(r["agent_steps"]) for r in rows[:2]] == [50, 50]
    lineage = list(csv.DictReader((run / "hpo.csv").open()))
    # one row per member per generation but the last (the run is then complete)
    assert len(lineage) == 6 and {r["generation"] for r in lineage} == {"1", "2", "3"}
    members = {int(r["index"]) for r in lineage}
    assert {int(r["agent"]) for r in rows} <= members | {0, 1}


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
def test_matd3_run_stopped_mid_generation_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay buffer stored in the checkpoint, the learning credits and the operators
    come back: the resumed run equals the one never stopped."""
    torch.set_num_threads(1)
    algorithm = {"name": "MATD3", "batch_size": 16, "learn_step": 4, "expl_noise": 0.2}
    manifest = _manifest(algorithm, continuous=True, learning_delay=30)
    whole = tmp_path / "whole"
    _train(manifest, whole)
    parts = tmp_path / "parts"
    with monkeypatch.context() as patch:  # 25 vector steps a member a generation: gen 3
        patch.setattr(PopulationLoop, "interrupted", stop_at_call(110))
        stopped = _train(manifest, parts)
    assert stopped["status"] == "interrupted" and stopped["total_steps"] == 200
    latest = parts / "checkpoints" / (parts / "checkpoints" / "latest").read_text().strip()
    memory = torch.load(latest / "memory.pt", weights_only=True)["memories"][0]
    assert memory["size"] == 200
    _train(manifest, parts, resume=True)
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
    parts = tmp_path / "parts"
    with monkeypatch.context() as patch:  # one rollout a member a generation: call 5 is gen 3
        patch.setattr(PopulationLoop, "interrupted", stop_at_call(5))
        stopped = _train(manifest, parts)
    assert stopped["status"] == "interrupted" and stopped["total_steps"] == 200
    assert len(_metrics(parts)) == 4  # the partial third generation was dropped
    _train(manifest, parts, resume=True)
    _assert_same_run(whole, parts)


def test_a_target_score_ends_the_run_after_the_generation_that_reaches_it(tmp_path: Path) -> None:
    """As single-agent runs: it used to train the whole budget and only then say
    ``target_reached``."""
    torch.set_num_threads(1)
    algorithm = {"name": "IPPO", "learn_step": 50, "batch_size": 25}
    run = tmp_path / "run"
    summary = _train(_manifest(algorithm, continuous=False, target_score=-10_000), run)
    assert summary["status"] == "target_reached" and summary["solved_at_step"] == 100
    assert summary["total_steps"] == 100  # one generation of two members, not the 400 budget
    assert len(_metrics(run)) == 2
    unreachable = tmp_path / "unreachable"
    summary = _train(_manifest(algorithm, continuous=False, target_score=10_000), unreachable)
    assert summary["status"] == "completed" and summary["total_steps"] == 400
