"""Tiny envs whose rewards turn bad after 40 steps, every action kind.

``discrete``/``continuous``: NaN rewards (the env guard names the step).
``huge_discrete``/``huge_continuous``: finite observations and rewards near float32's
largest value, which every guard on env data accepts and which overflow the networks'
activations and a float32 loss (a real non-finite loss; a distributional critic clips the
rewards, the observations still overflow it).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    """Random observations; reward is NaN from step 40 on."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def __init__(
        self, action_space: gym.Space, bad_reward: float = float("nan"), obs_scale: float = 1.0
    ) -> None:
        self.action_space = action_space
        self.bad_reward = bad_reward
        self.obs_scale = obs_scale
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action: object):
        self.t += 1
        reward = self.bad_reward if self.t > 40 else float(self.np_random.normal())
        obs = self.np_random.uniform(-1, 1, 4)
        if self.t > 40:
            obs = obs * self.obs_scale
        return obs.astype(np.float32), reward, False, self.t % 16 == 0, {}


def discrete() -> NanRewardEnv:
    return NanRewardEnv(gym.spaces.Discrete(2))


def continuous() -> NanRewardEnv:
    return NanRewardEnv(gym.spaces.Box(-1.0, 1.0, (1,), np.float32))


def huge_discrete() -> NanRewardEnv:
    return NanRewardEnv(gym.spaces.Discrete(2), bad_reward=3e38, obs_scale=3e38)


def huge_continuous() -> NanRewardEnv:
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    return NanRewardEnv(action_space, bad_reward=3e38, obs_scale=3e38)
