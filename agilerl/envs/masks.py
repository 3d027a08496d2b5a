"""Envs that report legal actions in ``info["action_mask"]``, moved into the observation.

Every masked algorithm reads the mask from the observation
(:mod:`agilerl.networks.masking`), PettingZoo classic's layout. With
``environment.action_mask: info`` each env copy is wrapped in
:class:`ActionMaskFromInfo`, so replay and rollout buffers store the mask
with the observation it belongs to, like any other masked env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agilerl.arena.models.errors import ConfigError
from agilerl.networks.masking import MASK_KEY, OBSERVATION_KEY, has_action_mask

__all__ = ["ActionMaskFromInfo", "mask_from_info", "mask_space"]


def mask_space(n: int) -> spaces.Box:
    """The ``action_mask`` entry of an observation of ``n`` actions."""
    return spaces.Box(0, 1, (n,), np.int8)


def mask_from_info(info: dict[str, Any], n: int, terminal: bool, where: str) -> np.ndarray:
    """``info["action_mask"]`` as an ``int8 [n]`` vector.

    A terminal step may leave it out (no action is legal there): all zeros.

    Raises:
        ConfigError: Naming ``environment.action_mask`` when it is missing
            elsewhere or has another width.
    """
    mask = info.get(MASK_KEY)
    if mask is None:
        if terminal:
            return np.zeros(n, dtype=np.int8)
        raise ConfigError(
            f"environment.action_mask: info, but the env's {where} info has no "
            f"{MASK_KEY!r}; report it there, or put it in the observation and remove "
            "environment.action_mask"
        )
    mask = np.asarray(mask, dtype=np.int8).reshape(-1)
    if mask.shape[0] != n:
        raise ConfigError(
            f"environment.action_mask: info[{MASK_KEY!r}] has {mask.shape[0]} entries, "
            f"the env has {n} actions"
        )
    return mask


def check_info_maskable(observation_space: spaces.Space, action_space: spaces.Space) -> int:
    """The number of actions an info mask covers.

    Raises:
        ConfigError: Naming ``environment.action_mask`` when the actions are not
            ``Discrete`` or the observations already carry a mask.
    """
    if not isinstance(action_space, spaces.Discrete):
        raise ConfigError(
            "environment.action_mask: info masks need Discrete actions, the env has "
            f"{action_space}; remove environment.action_mask"
        )
    if has_action_mask(observation_space):
        raise ConfigError(
            "environment.action_mask: info, but the observations already carry an "
            f"{MASK_KEY!r}; remove environment.action_mask (it is read from there)"
        )
    return int(action_space.n)


class ActionMaskFromInfo(gym.Wrapper):
    """Observations become ``{"observation": obs, "action_mask": info["action_mask"]}``.

    A step that ends the episode in a terminal state may leave the mask out
    (no action is legal there): it reads as all zeros. Any other step without
    one is an error.

    Args:
        env: An env with ``Discrete`` actions.

    Raises:
        ConfigError: Naming ``environment.action_mask`` when the actions are not
            ``Discrete``, the observations already carry a mask, or the env does not
            report one.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._n = check_info_maskable(env.observation_space, env.action_space)
        self.observation_space = spaces.Dict(
            {
                OBSERVATION_KEY: env.observation_space,
                MASK_KEY: mask_space(self._n),
            }
        )

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset; the first observation carries the first step's legal actions."""
        obs, info = self.env.reset(**kwargs)
        return {OBSERVATION_KEY: obs, MASK_KEY: mask_from_info(info, self._n, False, "reset")}, info

    def step(self, action: Any) -> tuple[Any, ...]:
        """Step; the observation carries the next step's legal actions."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        mask = mask_from_info(info, self._n, bool(terminated), "step")
        return {OBSERVATION_KEY: obs, MASK_KEY: mask}, reward, terminated, truncated, info
