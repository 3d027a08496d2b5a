"""CartPole without velocities: a partially observed control task for recurrent policies.

``CartPoleNoVel-v1`` is gymnasium's ``CartPole-v1`` (500-step limit, solved at
475) observed through :class:`NoVelocityObservation`: the observation is
``[cart position, pole angle]``, so a policy must infer the velocities from
the history it has seen (rl-zoo3's ``CartPoleNoVel-v1`` benchmark).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["CARTPOLE_NOVEL_ID", "NoVelocityObservation", "make_cartpole_novel", "register"]

CARTPOLE_NOVEL_ID = "CartPoleNoVel-v1"
_KEPT = np.array([0, 2])  # x, theta of CartPole's [x, x_dot, theta, theta_dot]


class NoVelocityObservation(gym.ObservationWrapper):
    """Keep CartPole's cart position and pole angle; drop both velocities.

    Args:
        env: A CartPole env (its observation is ``[x, x_dot, theta, theta_dot]``).

    Raises:
        ValueError: If the observation space is not CartPole's 4-vector.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or space.shape != (4,):
            raise ValueError(f"NoVelocityObservation needs CartPole's Box(4,), got {space}")
        self.observation_space = spaces.Box(space.low[_KEPT], space.high[_KEPT], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """``[x, theta]`` of a CartPole observation."""
        return observation[_KEPT]


def make_cartpole_novel(**kwargs: Any) -> gym.Env:
    """A CartPole env without velocities (gymnasium adds the time limit on ``gym.make``)."""
    return NoVelocityObservation(CartPoleEnv(**kwargs))


def register() -> None:
    """Register ``CartPoleNoVel-v1`` with gymnasium (once)."""
    if CARTPOLE_NOVEL_ID not in gym.registry:
        gym.register(
            CARTPOLE_NOVEL_ID,
            entry_point=make_cartpole_novel,
            max_episode_steps=500,
            reward_threshold=475.0,
        )


register()
