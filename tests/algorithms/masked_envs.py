"""Envs whose legal actions change every step and that refuse any other action.

:class:`RandomMaskEnv` (gymnasium; its PettingZoo twin is
``tests/algorithms_ma/masked_parallel_env.py``) draws a fresh random set of
legal actions at every step and raises on an illegal one, so a run that
finishes never took a masked action. The reward (1 for the legal action the
observation points at, else 0) gives the learners something to fit.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

N_ACTIONS = 5
EPISODE = 12


class IllegalAction(AssertionError):
    """An agent took an action its mask forbade."""


def draw_mask(rng: np.random.Generator) -> np.ndarray:
    mask = (rng.random(N_ACTIONS) < 0.4).astype(np.int8)
    if not mask.any():
        mask[rng.integers(N_ACTIONS)] = 1
    return mask


def rewarded_action(obs: np.ndarray, mask: np.ndarray) -> int:
    """The legal action with the largest observation entry (what earns reward)."""
    return int(np.where(mask > 0, obs, -np.inf).argmax())


class RandomMaskEnv(gym.Env):
    """A random observation and a random mask per step; ``info_mask`` reports the mask in
    ``info["action_mask"]`` instead of the observation."""

    def __init__(self, info_mask: bool = False) -> None:
        self.info_mask = info_mask
        box = spaces.Box(-1.0, 1.0, (N_ACTIONS,), np.float32)
        self.observation_space = (
            box
            if info_mask
            else spaces.Dict(
                {"observation": box, "action_mask": spaces.Box(0, 1, (N_ACTIONS,), np.int8)}
            )
        )
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.taken: list[int] = []

    def _emit(self) -> tuple[Any, dict[str, Any]]:
        self._obs = self.np_random.uniform(-1, 1, N_ACTIONS).astype(np.float32)
        self._mask = draw_mask(self.np_random)
        if self.info_mask:
            return self._obs, {"action_mask": self._mask}
        return {"observation": self._obs, "action_mask": self._mask}, {}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._emit()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        action = int(action)
        if not self._mask[action]:
            raise IllegalAction(f"action {action} is masked ({self._mask.tolist()})")
        self.taken.append(action)
        reward = float(action == rewarded_action(self._obs, self._mask))
        self._t += 1
        obs, info = self._emit()
        return obs, reward, False, self._t >= EPISODE, info


def vector_env(num_envs: int = 4, info_mask: bool = False, seed: int = 0) -> gym.vector.VectorEnv:
    """``num_envs`` copies in SAME_STEP autoreset mode (what the collectors need); with
    ``info_mask`` each is wrapped as ``environment.action_mask: info`` does."""
    from agilerl.envs.masks import ActionMaskFromInfo

    def make() -> gym.Env:
        return ActionMaskFromInfo(RandomMaskEnv(True)) if info_mask else RandomMaskEnv()

    env = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=seed)
    return env
