"""The envs of a whole population as one vector env of ``members x envs`` sub-envs.

Member ``i`` owns sub-envs ``i * E .. i * E + E - 1``. Seeding a member with
``s`` seeds its sub-env ``j`` with ``s + j``, exactly as ``reset(seed=s)``
seeds a member's own ``E``-env vector env, so a batched population meets the
same episodes as its members would one after another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agilerl.training.transitions import real_next_obs

__all__ = ["PopulationVectorEnv"]


class PopulationVectorEnv:
    """``members`` blocks of ``num_envs`` sub-envs stepped as one vector env.

    Args:
        factory: ``factory(seed=, num_envs=)`` making a gymnasium vector env
            (SAME_STEP autoreset).
        members: Population size.
        num_envs: Sub-envs per member.
    """

    def __init__(self, factory: Callable[..., Any], members: int, num_envs: int) -> None:
        self.members = int(members)
        self.num_envs = int(num_envs)
        self.env = factory(seed=None, num_envs=self.members * self.num_envs)

    def _split(self, array: np.ndarray) -> np.ndarray:
        return array.reshape(self.members, self.num_envs, *array.shape[1:])

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset member ``i`` with ``seeds[i]``; observations ``[members, num_envs, ...]``."""
        per_env = [int(s) + j for s in seeds for j in range(self.num_envs)]
        obs, _info = self.env.reset(seed=per_env)
        return self._split(np.asarray(obs))

    def step(self, actions: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Step every sub-env with its member's actions.

        Returns:
            ``(next_obs, real_next_obs, reward, terminated, truncated)``, each
            ``[members, num_envs, ...]``; ``real_next_obs`` holds the final
            observation where an episode ended (what a transition stores).
        """
        obs, reward, terminated, truncated, info = self.env.step(np.concatenate(actions))
        ended = terminated | truncated
        real = real_next_obs(obs, info, ended)
        return tuple(self._split(np.asarray(a)) for a in (obs, real, reward, terminated, truncated))

    def close(self) -> None:
        """Close the vector env."""
        self.env.close()
