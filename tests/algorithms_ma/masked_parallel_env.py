"""A PettingZoo parallel env whose legal actions change every step (see
``tests/algorithms/masked_envs.py``); an illegal action raises."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from tests.algorithms.masked_envs import (
    EPISODE,
    N_ACTIONS,
    IllegalAction,
    draw_mask,
    rewarded_action,
)


class RandomMaskParallelEnv(ParallelEnv):
    """Two agents with masked Discrete actions (PettingZoo parallel API); ``info_mask``
    reports each agent's mask in ``infos[agent]["action_mask"]`` instead."""

    metadata = {"name": "random_mask_v0"}

    def __init__(self, info_mask: bool = False) -> None:
        self.possible_agents = ["a_0", "b_0"]
        self.info_mask = info_mask
        box = spaces.Box(-1.0, 1.0, (N_ACTIONS,), np.float32)
        mask = spaces.Box(0, 1, (N_ACTIONS,), np.int8)
        self._obs_space = (
            box if info_mask else spaces.Dict({"observation": box, "action_mask": mask})
        )
        self._rng = np.random.default_rng(0)
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(N_ACTIONS)

    def _observe(self) -> dict[str, Any]:
        self._state = {
            a: {
                "observation": self._rng.uniform(-1, 1, N_ACTIONS).astype(np.float32),
                "action_mask": draw_mask(self._rng),
            }
            for a in self.agents
        }
        if self.info_mask:
            return {a: s["observation"] for a, s in self._state.items()}
        return self._state

    def _infos(self) -> dict[str, dict[str, Any]]:
        if self.info_mask:
            return {a: {"action_mask": s["action_mask"]} for a, s in self._state.items()}
        return {a: {} for a in self._state}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        return self._observe(), self._infos()

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        rewards = {}
        for agent in self.agents:
            action, state = int(actions[agent]), self._state[agent]
            if not state["action_mask"][action]:
                raise IllegalAction(f"{agent}: action {action} is masked")
            rewards[agent] = float(
                action == rewarded_action(state["observation"], state["action_mask"])
            )
        self._t += 1
        done = self._t >= EPISODE
        obs = self._observe()
        terminated = dict.fromkeys(self.agents, False)
        truncated = dict.fromkeys(self.agents, done)
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, self._infos()


def parallel_env(info_mask: bool = False) -> RandomMaskParallelEnv:
    """What makes this module a PettingZoo env module (``environment.name``)."""
    return RandomMaskParallelEnv(info_mask)
