"""The envs of a whole population as one vector env of ``members x envs`` sub-envs.

Member ``i`` owns sub-envs ``i * E .. i * E + E - 1``. Seeding a member with
``s`` seeds its sub-env ``j`` with ``s + j``, exactly as ``reset(seed=s)``
seeds a member's own ``E``-env vector env, so a batched population meets the
same episodes as its members would one after another.

With ``per_member`` every member has a vector env of its own instead, and
:meth:`PopulationVectorEnv.step` can leave members out: an evaluation stops
stepping a member once it has played its episodes, as a lone agent's would.
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
        per_member: One vector env per member (members can then be left out
            of a step), instead of one for the whole population.
    """

    def __init__(
        self,
        factory: Callable[..., Any],
        members: int,
        num_envs: int,
        *,
        per_member: bool = False,
    ) -> None:
        self.members = int(members)
        self.num_envs = int(num_envs)
        self.envs: list[Any] | None = None
        if per_member:
            self.envs = [factory(seed=None, num_envs=self.num_envs) for _ in range(self.members)]
            self.env = None
        else:
            self.env = factory(seed=None, num_envs=self.members * self.num_envs)
        self._obs: np.ndarray | None = None

    def _split(self, array: np.ndarray) -> np.ndarray:
        return array.reshape(self.members, self.num_envs, *array.shape[1:])

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset member ``i`` with ``seeds[i]``; observations ``[members, num_envs, ...]``."""
        if self.envs is not None:
            pairs = zip(self.envs, seeds, strict=True)
            self._obs = np.stack([np.asarray(env.reset(seed=int(s))[0]) for env, s in pairs])
            return self._obs.copy()
        per_env = [int(s) + j for s in seeds for j in range(self.num_envs)]
        obs, _info = self.env.reset(seed=per_env)
        return self._split(np.asarray(obs))

    def step(
        self, actions: Sequence[np.ndarray], members: Sequence[int] | None = None
    ) -> tuple[np.ndarray, ...]:
        """Step every sub-env with its member's actions.

        Args:
            actions: One action array per member (all members, even those left out).
            members: The members to step (``per_member`` envs only); the others'
                envs stay where they are: their observations repeat, with zero
                reward and no episode end. All members by default.

        Returns:
            ``(next_obs, real_next_obs, reward, terminated, truncated)``, each
            ``[members, num_envs, ...]``; ``real_next_obs`` holds the final
            observation where an episode ended (what a transition stores).
        """
        if self.envs is not None:
            return self._step_members(actions, range(self.members) if members is None else members)
        if members is not None and len(members) != self.members:
            raise ValueError("only a per_member PopulationVectorEnv can leave members out")
        obs, reward, terminated, truncated, info = self.env.step(np.concatenate(actions))
        ended = terminated | truncated
        real = real_next_obs(obs, info, ended)
        return tuple(self._split(np.asarray(a)) for a in (obs, real, reward, terminated, truncated))

    def _step_members(
        self, actions: Sequence[np.ndarray], members: Sequence[int]
    ) -> tuple[np.ndarray, ...]:
        assert self.envs is not None and self._obs is not None
        obs = self._obs
        real = obs.copy()
        shape = (self.members, self.num_envs)
        reward = np.zeros(shape, dtype=np.float64)
        terminated = np.zeros(shape, dtype=bool)
        truncated = np.zeros(shape, dtype=bool)
        for i in members:
            o, r, term, trunc, info = self.envs[i].step(actions[i])
            o = np.asarray(o)
            obs[i] = o
            real[i] = real_next_obs(o, info, term | trunc)
            reward[i], terminated[i], truncated[i] = r, term, trunc
        return obs.copy(), real, reward, terminated, truncated

    def close(self) -> None:
        """Close the vector env(s)."""
        for env in self.envs if self.envs is not None else [self.env]:
            env.close()
