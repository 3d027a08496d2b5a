"""A batched Rainbow DQN population (PER + n-step memories) learns what its members learn alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.training.batched_helpers import (
    EVO_NETWORK,
    EVOLUTION,
    NET,
    assert_same_runs,
    final_states,
    rows,
    train_both_modes,
    train_manifest,
)


def _manifest(hpo: bool) -> dict:
    """Three members with their own PER + n-step memories; HPO with every mutation kind."""
    manifest = {
        "algorithm": {"name": "Rainbow DQN", "lr": 2e-3, "batch_size": 16, "learn_step": 2,
                      "tau": 0.05, "num_atoms": 21, "v_min": 0.0, "v_max": 50.0},
        "environment": {"name": "CartPole-v1", "num_envs": 2},
        "network": EVO_NETWORK if hpo else NET,
        "replay_buffer": {"max_size": 5000, "per_buffer": True, "per_buffer_args": {"alpha": 0.6},
                          "n_step_buffer": True, "n_step_buffer_args": {"n_step": 3},
                          "store_in_checkpoint": hpo},
        "training": {"max_steps": 600 if hpo else 300, "evo_steps": 200 if hpo else 150,
                     "pop_size": 3, "hpo": hpo, "eval_loop": 1, "eval_steps": 100,
                     "learning_delay": 50, "experience_sharing": False},
    }  # fmt: skip
    return {**manifest, **EVOLUTION} if hpo else manifest


def test_batched_population_matches_sequential_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agilerl.algorithms.batched import RainbowGroup

    torch.set_num_threads(1)
    train_both_modes(_manifest(False), tmp_path, RainbowGroup, monkeypatch, members=3)
    assert_same_runs(tmp_path / "batched", tmp_path / "sequential", abs_tol=1e-4)
    states = final_states(tmp_path / "batched")
    assert all(s["num_updates"] > 50 for s in states)
    heads = [s["networks"]["actor"]["value.layers.0.weight_mu"] for s in states]
    assert not torch.allclose(heads[0], heads[1])  # the members differ: not one agent thrice


@pytest.mark.slow
def test_batched_hpo_run_matches_sequential_and_resumes_across_modes(tmp_path: Path) -> None:
    """Evolution between batched generations gives the sequential run; a batched checkpoint
    (memories, priorities and the members' noise generators included) resumes sequentially."""
    torch.set_num_threads(1)
    train_manifest(_manifest(True), tmp_path / "batched", True)
    train_manifest(_manifest(True), tmp_path / "sequential", False)
    lineage = rows(tmp_path / "sequential", "hpo.csv", ("mutation",))
    assert any(r[0] not in ("None", "") for r in lineage), "no mutation happened"
    assert_same_runs(tmp_path / "batched", tmp_path / "sequential", abs_tol=1e-4)
    train_manifest(_manifest(True), tmp_path / "mixed", True, stop_after=1)
    train_manifest(_manifest(True), tmp_path / "mixed", False, resume=True)
    assert_same_runs(tmp_path / "mixed", tmp_path / "sequential", abs_tol=1e-4)
