"""Tiny envs whose rewards turn NaN after a few steps (the divergence guard, every action kind)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    """Random observations; reward is NaN from step 40 on."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def __init__(self, action_space: gym.Space) -> None:
        self.action_space = action_space
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action: object):
        self.t += 1
        reward = float("nan") if self.t > 40 else float(self.np_random.normal())
        obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return obs, reward, False, self.t % 16 == 0, {}


def discrete() -> NanRewardEnv:
    return NanRewardEnv(gym.spaces.Discrete(2))


def continuous() -> NanRewardEnv:
    return NanRewardEnv(gym.spaces.Box(-1.0, 1.0, (1,), np.float32))
