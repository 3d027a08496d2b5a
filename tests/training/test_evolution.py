"""Evolutionary HPO through the real loops: learning, lineage, exact resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from agilerl.arena.models import TrainingManifest
from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer
from agilerl.training.population_loop import PopulationLoop


@pytest.mark.slow  # ~10-16 s: the default suite stays near 5 min on a slow host
def test_dqn_population_with_hpo_solves_cartpole_and_records_lineage(
    compose, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    overrides = (
        "algorithm=dqn",
        "env=cartpole",
        "hpo=evolutionary",
        "training.pop_size=4",
        "training.evo_steps=2500",
    )
    manifest, _ = build_manifest(compose(*overrides))
    run = tmp_path / "evo"
    LocalTrainer.from_manifest(
        manifest, run_dir=run, verbose=False, logger={"tensorboard": False}
    ).train()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "target_reached" and summary["best_fitness"] >= 475, summary
    lineage = list(csv.DictReader((run / "hpo.csv").open()))
    assert lineage, "no generation was recorded"
    assert any(r["mutation"] != "None" for r in lineage)
    assert any(r["elite"] == "True" for r in lineage)
    assert all(int(r["index"]) >= 0 and int(r["parent"]) >= 0 for r in lineage)
    new_members = [r for r in lineage if r["index"] != r["parent"]]
    assert new_members, "selection produced no clone"
    assert (run / "plots" / "population.png").exists()


PPO_EVO = {
    "algorithm": {
        "name": "PPO",
        "learn_step": 256,
        "batch_size": 128,
        "update_epochs": 2,
        "lr": 1e-3,
    },
    "environment": {"name": "CartPole-v1", "num_envs": 4},
    "network": {
        "latent_dim": 32,
        "encoder_config": {"arch": "mlp", "hidden_size": [32]},
        "head_config": {"hidden_size": [32]},
    },
    "training": {
        "max_steps": 4096,
        "evo_steps": 1024,
        "pop_size": 3,
        "hpo": True,
        "eval_loop": 2,
        "eval_steps": 200,
        "checkpoint_steps": 100_000,
    },
    "mutation": {
        "probabilities": {
            "no_mut": 0.2,
            "arch_mut": 0.2,
            "new_layer": 0.5,
            "params_mut": 0.2,
            "act_mut": 0.2,
            "rl_hp_mut": 0.2,
        },
        "rand_seed": 3,
    },
    "tournament_selection": {"tournament_size": 2, "elitism": True},
}


def _final_weights(run: Path) -> list[dict]:
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    return [torch.load(p, weights_only=True) for p in sorted(latest.glob("agent_*.pt"))]


def test_interrupted_and_resumed_equals_uninterrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    manifest = TrainingManifest.from_dict(PPO_EVO)
    whole = tmp_path / "whole"
    LocalTrainer.from_manifest(manifest, run_dir=whole, seed=4, verbose=False).train()

    original = PopulationLoop.end_generation

    def stop_after_second(self: PopulationLoop, fitness: list, details: list) -> None:
        original(self, fitness, details)
        if self.generation == 2:
            self.run.stop_requested = "test"

    parts = tmp_path / "parts"
    with monkeypatch.context() as patch:
        patch.setattr(PopulationLoop, "end_generation", stop_after_second)
        LocalTrainer.from_manifest(manifest, run_dir=parts, seed=4, verbose=False).train()
    assert json.loads((parts / "summary.json").read_text())["status"] == "interrupted"
    LocalTrainer.from_manifest(manifest, run_dir=parts, seed=4, resume=True, verbose=False).train()

    def table(run: Path, name: str, columns: tuple[str, ...]) -> list[tuple]:
        return [tuple(r[c] for c in columns) for r in csv.DictReader((run / name).open())]

    metric_columns = ("step", "generation", "agent", "fitness", "policy_loss")
    assert table(parts, "metrics.csv", metric_columns) == table(
        whole, "metrics.csv", metric_columns
    )
    lineage_columns = ("generation", "index", "parent", "mutation", "detail")
    assert table(parts, "hpo.csv", lineage_columns) == table(whole, "hpo.csv", lineage_columns)
    for a, b in zip(_final_weights(whole), _final_weights(parts), strict=True):
        assert a["index"] == b["index"] and a["steps"] == b["steps"]
        for name, net in a["networks"].items():
            for key, tensor in net.items():
                assert torch.equal(tensor, b["networks"][name][key]), (name, key)


def test_hpo_with_a_single_agent_warns() -> None:
    data = {
        "algorithm": {"name": "DQN"},
        "environment": {"name": "CartPole-v1"},
        "training": {"hpo": True, "pop_size": 1},
    }
    with pytest.warns(UserWarning, match="nothing to choose from"):
        TrainingManifest.from_dict(data)
