"""CartPole (or ``env_id``) with a fault at a chosen env step: raise, NaN, or a signal.

Used through ``environment.entrypoint: tests.reliability.faulty_envs:make`` (with the
``trust_code`` opt-in, as any entrypoint).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


class Faulty(gym.Wrapper):
    """Counts env steps across episodes; at step ``at`` does ``fault``."""

    def __init__(self, env: gym.Env, fault: str, at: int, flag: str | None = None) -> None:
        super().__init__(env)
        self.fault = fault
        self.at = at
        self.flag = flag
        self.t = 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.t == self.at:
            if self.fault == "raise":
                raise RuntimeError("the physics engine exploded")
            if self.fault == "nan_obs":
                obs = np.full_like(obs, np.nan)
            if self.fault in ("sigterm", "sigint") and self.flag and not Path(self.flag).exists():
                Path(self.flag).write_text("sent\n")  # once: the resumed run is not signalled
                signum = signal.SIGTERM if self.fault == "sigterm" else signal.SIGINT
                os.kill(os.getpid(), signum)
        return obs, reward, terminated, truncated, info


def make(
    fault: str = "none", at: int = 10**9, flag: str | None = None, env_id: str = "CartPole-v1"
) -> gym.Env:
    return Faulty(gym.make(env_id), fault, at, flag)
