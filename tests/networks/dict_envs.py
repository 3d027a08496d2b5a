"""A real Dict-observation env for the multi-input tests: CartPole seen as a vector and an image.

``{"vec": Box(4,) float32, "img": Box(0, 255, (1, 8, 8), uint8)}``: the vector is
CartPole's state; the image lights one pixel per row at the cart position
(columns) and a second one at the pole angle, so both parts carry the task.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SIZE = 8


class CartPoleDict(gym.ObservationWrapper):
    """CartPole with a ``{"vec", "img"}`` observation."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = spaces.Dict(
            {
                "vec": env.observation_space,
                "img": spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8),
            }
        )

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        image = np.zeros((1, SIZE, SIZE), np.uint8)
        x, theta = float(observation[0]), float(observation[2])
        col = int(np.clip((x + 2.4) / 4.8 * SIZE, 0, SIZE - 1))
        row = int(np.clip((theta + 0.21) / 0.42 * SIZE, 0, SIZE - 1))
        image[0, :, col] = 128
        image[0, row, :] = 255
        return {"vec": observation.astype(np.float32), "img": image}


def cartpole_dict(**kwargs: object) -> gym.Env:
    """``CartPole-v1`` (with its time limit) observed as a dict."""
    return CartPoleDict(gym.make("CartPole-v1", **kwargs))
