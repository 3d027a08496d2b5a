"""A tiny env whose rewards turn NaN after a few steps (for the divergence guard test)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    """CartPole-shaped observations; reward is NaN from step 50 on."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: int):
        self.t += 1
        reward = float("nan") if self.t > 50 else 1.0
        return np.zeros(4, np.float32), reward, False, self.t % 20 == 0, {}


def make() -> NanRewardEnv:
    return NanRewardEnv()
