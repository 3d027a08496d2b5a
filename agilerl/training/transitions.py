"""Turning a SAME_STEP-autoreset vector step into stored transitions."""

from __future__ import annotations

from typing import Any

import numpy as np


def real_next_obs(next_obs: Any, info: dict[str, Any], ended: np.ndarray) -> Any:
    """``next_obs`` with the true final observation where an episode ended.

    With ``AutoresetMode.SAME_STEP`` a finished sub-env returns the first
    observation of its next episode; the final one is in ``info["final_obs"]``.
    """
    if not ended.any():
        return next_obs
    idx = np.flatnonzero(ended)
    final = info["final_obs"]
    if isinstance(next_obs, dict):
        out = {k: v.copy() for k, v in next_obs.items()}
        for i in idx:
            for key in out:
                out[key][i] = final[i][key]
        return out
    out = next_obs.copy()
    out[idx] = np.stack([final[i] for i in idx])
    return out


class EpisodeTracker:
    """Running returns per sub-env; finished episodes are collected."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.finished: list[float] = []

    def step(self, reward: np.ndarray, ended: np.ndarray) -> None:
        self.returns += reward
        if ended.any():
            idx = np.flatnonzero(ended)
            self.finished.extend(self.returns[idx].tolist())
            self.returns[idx] = 0.0

    def pop(self) -> list[float]:
        finished, self.finished = self.finished, []
        return finished
