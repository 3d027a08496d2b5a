"""An exported policy normalises its observations with the agent's running statistics."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import agilerl
from agilerl.algorithms import PPO, SAC, TD3
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.deploy.exporting import export_policy
from agilerl.networks.normalization import NormalizedEncoder
from tests.deploy.test_export_policy import FORMATS, assert_same_actions, run_exported

NET = {
    "latent_dim": 8,
    "encoder_config": {"arch": "mlp", "hidden_size": [8]},
    # full-size outputs: the actions move with the inputs instead of sitting near 0
    "head_config": {"hidden_size": [8], "output_vanish": False},
    "normalize_observations": True,
}


def _obs(n: int, seed: int) -> np.ndarray:
    """Pendulum-like observations far from zero mean and unit scale."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 3)) * [4.0, 0.5, 20.0] + [30.0, -2.0, 5.0]).astype(np.float32)


def _saved_agent(tmp_path: Path, cls: type) -> Path:
    """An untrained Pendulum agent whose statistics were fit on badly scaled observations."""
    env = gym.make("Pendulum-v1")
    torch.manual_seed(0)
    spec = MANIFEST_REGISTRY.create(cls.__name__, net_config=NET)
    agent = cls(spec, env.observation_space, env.action_space)
    fit = torch.from_numpy(_obs(256, seed=1))
    for name in agent.network_names:
        for module in getattr(agent, name).modules():
            if isinstance(module, NormalizedEncoder):
                module.obs_norm.update(fit)
    path = tmp_path / "agent_0.pt"
    agent.save_checkpoint(path)
    return path


CASES = [
    pytest.param(
        cls, format, marks=[pytest.mark.slow] if format == "onnx" and cls is not PPO else []
    )
    for cls in (PPO, SAC, TD3)
    for format in FORMATS
]
"""ONNX exports take seconds each: PPO's runs by default, SAC's and TD3's in the slow suite."""


@pytest.mark.parametrize(("cls", "format"), CASES)
def test_the_exported_policy_normalises_like_the_agent(
    cls: type, format: str, tmp_path: Path
) -> None:
    agent_file = _saved_agent(tmp_path, cls)
    result = export_policy(agent_file, format, tmp_path / f"policy.{format}")
    assert result.checked == 64
    obs = _obs(100, seed=2)
    loaded = agilerl.load(agent_file)
    expected = loaded.act(obs)
    exported = run_exported(result.path, format, {"obs": obs})
    assert_same_actions(exported, expected)
    # without the statistics the same weights act differently: the graph holds them
    for module in loaded.algorithm.actor.modules():
        if isinstance(module, NormalizedEncoder):
            module.obs_norm.mean.zero_()
            module.obs_norm.var.fill_(1.0)
    assert not np.allclose(loaded.act(obs), exported, atol=1e-3)
