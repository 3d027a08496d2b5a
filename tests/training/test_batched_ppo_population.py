"""A batched PPO population learns what its members learn one after another."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from agilerl.algorithms.ppo import PPO
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.training import TrainingSpec
from agilerl.envs.gym import make_vector_env
from agilerl.training.population_loops import train_on_policy_population
from agilerl.training.run_context import RunContext
from tests.training.batched_helpers import EVOLUTION, assert_same_runs, rows, train_manifest

NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}
SHAPES = {"learn_step": 64, "batch_size": 32, "update_epochs": 3}
HPS = [
    {"lr": 2e-3, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2},
    {"lr": 5e-4, "gamma": 0.95, "gae_lambda": 0.8, "clip_coef": 0.1, "ent_coef": 0.01},
    {"lr": 1e-2, "gamma": 0.98, "vf_coef": 0.25, "max_grad_norm": 0.1, "target_kl": 1e-4},
    {"lr": 3e-3, "lr_schedule": {"kind": "linear", "end": 0.0}, "clip_coef": 0.3},
]


def _population(probe: tuple, num_envs: int) -> list[PPO]:
    # Member 4 shares its encoders (a stacked group of its own); member 5's GELU head is no
    # plain chain: it learns on its own beside the stacked groups.
    gelu = {**NET, "head_config": {"hidden_size": [16], "activation": "GELU"}}
    settings = [
        *({"net_config": NET, **hp} for hp in HPS),
        {"net_config": NET, "share_encoders": True, **HPS[0]},
        {"net_config": gelu, **HPS[1]},
    ]
    return [
        PPO(
            PPOSpec.model_validate({**SHAPES, "num_envs": num_envs, **hp}),
            *probe,
            index=i,
            total_steps=384,
        )
        for i, hp in enumerate(settings)
    ]


def _run(batched: bool, num_envs: int = 2, env_name: str = "CartPole-v1") -> list[PPO]:
    torch.manual_seed(0)
    env_spec = GymEnvSpec(name=env_name, num_envs=num_envs)

    def factory(seed: int | None = None, num_envs: int | None = None) -> object:
        return make_vector_env(env_spec, num_envs, seed=seed)

    env = factory(seed=0)
    population = _population((env.single_observation_space, env.single_action_space), num_envs)
    result = train_on_policy_population(
        population,
        env,
        training=TrainingSpec(
            max_steps=384, evo_steps=192, eval_loop=2, eval_steps=100, batched_population=batched
        ),
        env_factory=factory,
        run=RunContext.ephemeral(),
    )
    env.close()
    return result.population


@pytest.mark.parametrize("env_name", ["CartPole-v1", "Pendulum-v1"])
def test_batched_ppo_population_matches_sequential_members(env_name: str) -> None:
    """Discrete (categorical) and continuous (Gaussian, its log_std stacked too) actions."""
    from agilerl.algorithms.batched import LoneGroup, PPOGroup, make_groups

    torch.set_num_threads(1)
    batched, sequential = _run(True, env_name=env_name), _run(False, env_name=env_name)
    groups = make_groups(batched)
    assert [type(g) for g in groups] == [PPOGroup, PPOGroup, LoneGroup]
    assert [g.slots for g in groups] == [[0, 1, 2, 3], [4], [5]]
    for b, s in zip(batched, sequential, strict=True):
        assert b.steps == s.steps == 384
        assert b.num_updates == s.num_updates > 0
        assert b.optimizer.step_count == s.optimizer.step_count
        assert b.scores == s.scores
        assert b.fitness == pytest.approx(s.fitness)
        assert b.optimizer.param_groups[0]["lr"] == pytest.approx(s.optimizer.param_groups[0]["lr"])
        torch.testing.assert_close(b.generator.get_state(), s.generator.get_state())
        for x, y in zip(b.optimizer.params, s.optimizer.params, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-5)
    # target_kl stopped member 2 early; the others ran every epoch.
    assert batched[2].num_updates < batched[0].num_updates == 2 * 3 * 2 * 3
    assert not math.isclose(batched[0].fitness[-1], batched[1].fitness[-1])


PPO_EVO = {
    "algorithm": {"name": "PPO", **SHAPES, "lr": 2e-3, "update_epochs": 2},
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "network": NET,
    "training": {
        "max_steps": 768,
        "evo_steps": 256,
        "pop_size": 3,
        "hpo": True,
        "eval_loop": 2,
        "eval_steps": 200,
    },
    **EVOLUTION,
}


@pytest.mark.slow
def test_batched_ppo_hpo_run_matches_sequential_and_resumes_across_modes(tmp_path: Path) -> None:
    """Evolution between batched generations gives the sequential run; a batched checkpoint
    resumes sequentially and back, continuing exactly as the uninterrupted run."""
    torch.set_num_threads(1)
    train_manifest(PPO_EVO, tmp_path / "batched", True)
    train_manifest(PPO_EVO, tmp_path / "sequential", False)
    lineage = rows(tmp_path / "sequential", "hpo.csv", ("mutation",))
    assert any(r[0] not in ("None", "") for r in lineage), "no mutation happened"
    assert_same_runs(tmp_path / "batched", tmp_path / "sequential", loss="value_loss")
    mixed = tmp_path / "mixed"
    train_manifest(PPO_EVO, mixed, True, stop_after=1)
    train_manifest(PPO_EVO, mixed, False, stop_after=2, resume=True)
    train_manifest(PPO_EVO, mixed, True, resume=True)
    assert_same_runs(mixed, tmp_path / "sequential", loss="value_loss")
