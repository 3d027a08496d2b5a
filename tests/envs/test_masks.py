"""``environment.action_mask``: masks reported in ``info`` move into the observation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.envs.masks import ActionMaskFromInfo
from tests.algorithms.masked_envs import RandomMaskEnv


def test_info_masks_become_observation_masks() -> None:
    env = ActionMaskFromInfo(RandomMaskEnv(info_mask=True))
    obs, info = env.reset(seed=0)
    assert np.array_equal(obs["action_mask"], info["action_mask"])
    obs, *_, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    assert np.array_equal(obs["action_mask"], info["action_mask"])
    with pytest.raises(ConfigError, match=r"environment\.action_mask: info masks need Discrete"):
        ActionMaskFromInfo(gym.make("Pendulum-v1"))
    with pytest.raises(ConfigError, match="already carry an 'action_mask'"):
        ActionMaskFromInfo(RandomMaskEnv())
    with pytest.raises(ConfigError, match="reset info has no 'action_mask'"):
        ActionMaskFromInfo(gym.make("CartPole-v1")).reset(seed=0)


def test_action_mask_field_is_validated() -> None:
    from pydantic import ValidationError

    from agilerl.arena.models.env import OfflineEnvSpec

    assert GymEnvSpec(name="CartPole-v1", action_mask="info").action_mask == "info"
    with pytest.raises(ValidationError, match="action_mask"):
        GymEnvSpec(name="CartPole-v1", action_mask="infos")
    with pytest.raises(ValidationError, match="remove action_mask"):
        OfflineEnvSpec(name="CartPole-v1", dataset_path="x.npz", action_mask="info")
    assert isinstance(
        ActionMaskFromInfo(RandomMaskEnv(True)).observation_space["action_mask"], spaces.Box
    )


def test_validation_makes_the_env_and_reads_its_first_mask(compose, monkeypatch) -> None:
    from agilerl.launch.compose import build_manifest
    from agilerl.launch.env_check import check_environment

    monkeypatch.setenv("AGILERL_CACHE_DIR", "off")
    manifest, _ = build_manifest(
        compose("algorithm=ppo", "env=cartpole", "environment.action_mask=info")
    )
    with pytest.raises(ConfigError, match="reset info has no 'action_mask'"):
        check_environment(manifest)
