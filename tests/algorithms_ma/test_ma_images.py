"""IPPO on image observations: a CNN per agent, and the public implementation's image manifests.

The public implementation ships IPPO manifests for PettingZoo's cooperative Pong
(``[280, 480, 3]`` RGB frames per paddle) with a CNN encoder (its ``ippo_cnn`` and
``ippo_pong`` examples). Written here in the same layout, they validate and train for a
tiny budget; multi-agent algorithms that cannot build a CNN refuse one at validation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
from agilerl.algorithms.ippo import IPPO
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.networks.flat_image import FlatImageNet

CNN = {
    "latent_dim": 128,
    "arch": "cnn",
    "encoder_config": {
        "channel_size": [64, 64, 32],
        "kernel_size": [8, 6, 4],
        "stride_size": [4, 2, 2],
    },
    "head_config": {"hidden_size": [128]},
}
PONG = "pettingzoo.butterfly.cooperative_pong_v6"
PUBLIC_LAYOUT = {
    "ippo_cnn": {
        "algorithm": {"name": "IPPO", "lr": 0.0001, "learn_step": 2048},
        "environment": {"name": PONG, "num_envs": 16},
        "network": CNN,
        "training": {"max_steps": 1000, "evo_steps": 100, "pop_size": 2},
    },
    "ippo_pong": {
        "algorithm": {
            "name": "IPPO",
            "batch_size": 256,
            "lr": 0.0001,
            "learn_step": 2048,
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "clip_coef": 0.2,
            "ent_coef": 0.05,
            "vf_coef": 0.5,
            "max_grad_norm": 0.5,
            "update_epochs": 4,
        },
        "environment": {"name": PONG, "num_envs": 16},
        "network": {
            **CNN,
            "encoder_config": {**CNN["encoder_config"], "activation": "ReLU"},
            "head_config": {"hidden_size": [128], "activation": "ReLU"},
        },
        "training": {"max_steps": 2_000_000, "evo_steps": 10_000, "pop_size": 1},
    },
}
TINY = {
    "environment": {"num_envs": 2, "env_config": {"max_cycles": 20}},
    "algorithm": {"learn_step": 16, "batch_size": 16, "update_epochs": 1},
    "training": {"max_steps": 32, "evo_steps": 16, "eval_loop": 1, "eval_steps": 16},
}
"""The budget: 32 env steps and one epoch per rollout, short episodes (the architecture and
the rates are the manifest's): a CPU convolves these 280x480 frames at ~10 frames/s."""


def _small_cnn_spec(**fields: object) -> IPPOSpec:
    net = {
        "latent_dim": 16,
        "encoder_config": {
            "arch": "cnn",
            "channel_size": [8],
            "kernel_size": [3],
            "stride_size": [2],
        },
        "head_config": {"hidden_size": [8]},
    }
    return IPPOSpec(net_config=net, **fields)


def test_ippo_builds_a_cnn_per_agent_and_acts_on_image_batches() -> None:
    image = spaces.Box(0, 255, (12, 16, 3), np.uint8)  # channels last, as PettingZoo's
    agents = {"paddle_0": image, "paddle_1": image}
    actions = {a: spaces.Discrete(3) for a in agents}
    agent = IPPO(_small_cnn_spec(), agents, actions)
    assert all(
        isinstance(n, FlatImageNet) for n in (*agent.actors.values(), *agent.critics.values())
    )
    assert agent.actors["paddle_0"].encoder.convs[0].in_channels == 3
    obs = {a: np.random.default_rng(0).integers(0, 256, (5, 12, 16, 3), np.uint8) for a in agents}
    step = agent.policy_step(obs)
    assert step["action"]["paddle_0"].shape == (5,) and step["value"]["paddle_1"].shape == (5,)
    clone = MultiAgentAlgorithm.from_state(agent.state_dict())
    torch.testing.assert_close(clone.values(obs)["paddle_0"], agent.values(obs)["paddle_0"])


def test_ippo_learns_from_an_image_rollout() -> None:
    image = spaces.Box(0, 255, (12, 16, 3), np.uint8)
    agent = IPPO(_small_cnn_spec(batch_size=8), {"a": image}, {"a": spaces.Discrete(3)})
    rng = np.random.default_rng(1)
    steps, envs = 4, 3
    rollout: dict = {k: {} for k in ("obs", "critic_obs", "action", "log_prob", "value")}
    for key in ("reward", "done", "active", "last_value"):
        rollout[key] = {}
    parts = [
        agent.policy_step({"a": rng.integers(0, 256, (envs, 12, 16, 3))}) for _ in range(steps)
    ]
    for key in ("obs", "critic_obs", "action", "log_prob", "value"):
        rollout[key]["a"] = torch.stack([p[key]["a"] for p in parts])
    rollout["reward"]["a"] = torch.ones(steps, envs)
    rollout["done"]["a"] = torch.zeros(steps, envs)
    rollout["active"]["a"] = torch.ones(steps, envs)
    rollout["last_value"]["a"] = torch.zeros(envs)
    before = [p.detach().clone() for p in agent.actors["a"].parameters()]
    losses = agent.learn(rollout)
    assert np.isfinite(list(losses.values())).all()
    after = list(agent.actors["a"].parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


@pytest.mark.parametrize(
    ("algorithm", "problem"),
    [
        ({"name": "MADDPG"}, "MADDPG builds MLP networks on flattened observations, not 'cnn'"),
        ({"name": "MATD3"}, "MATD3 builds MLP networks"),
        ({"name": "IPPO", "shared_critic_input": True}, "with shared_critic_input: true"),
    ],
)
def test_multi_agent_cnns_that_cannot_be_built_are_refused(algorithm: dict, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        TrainingManifest.from_dict(
            {"algorithm": algorithm, "environment": {"name": PONG}, "network": CNN}
        )


def _layered(base: dict, top: dict) -> dict:
    return {k: {**base.get(k, {}), **top.get(k, {})} for k in {*base, *top}}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLIC_LAYOUT))
def test_public_image_manifests_train_for_a_tiny_budget(name: str, tmp_path: Path) -> None:
    from agilerl.trainer import LocalTrainer

    pytest.importorskip("pettingzoo.butterfly.cooperative_pong_v6")
    TrainingManifest.from_dict(PUBLIC_LAYOUT[name])  # valid as written
    manifest = TrainingManifest.from_dict(_layered(PUBLIC_LAYOUT[name], TINY))
    LocalTrainer.from_manifest(
        manifest, run_dir=tmp_path, verbose=False, logger={"tensorboard": False}
    ).train()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] >= 32
    assert summary["best_fitness"] is not None
