"""Exported policies of masked agents take the mask as an input and pick legal actions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DQN, PPO
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.deploy.exporting import export_policy
from tests.algorithms.masked_envs import N_ACTIONS, RandomMaskEnv
from tests.deploy.test_export_policy import run_exported

OBS = RandomMaskEnv().observation_space
AGENTS = {
    "dqn": lambda: DQN(DQNSpec(), OBS, spaces.Discrete(N_ACTIONS)),
    "ppo": lambda: PPO(PPOSpec(), OBS, spaces.Discrete(N_ACTIONS)),
}


@pytest.mark.parametrize(
    "format",
    ["torchscript", pytest.param("onnx", marks=pytest.mark.slow)],  # onnx: ~15 s warm-up
)
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_exported_masked_policy_acts_like_the_agent(tmp_path: Path, name: str, format: str) -> None:
    if format == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    agent = AGENTS[name]()
    agent.save_checkpoint(tmp_path / "agent_0.pt")
    result = export_policy(tmp_path / "agent_0.pt", format, tmp_path / f"policy.{format}")
    assert [i["name"] for i in result.inputs] == ["obs.action_mask", "obs.observation"]
    rng = np.random.default_rng(1)
    mask = (rng.random((64, N_ACTIONS)) < 0.4).astype(np.float32)
    mask[np.arange(64), rng.integers(N_ACTIONS, size=64)] = 1.0
    obs = rng.uniform(-1, 1, (64, N_ACTIONS)).astype(np.float32)
    got = run_exported(result.path, format, {"obs.action_mask": mask, "obs.observation": obs})
    assert np.all(mask[np.arange(64), got] == 1.0)
    expected = agent.act({"observation": obs, "action_mask": mask}, greedy=True)
    np.testing.assert_array_equal(got, expected)
