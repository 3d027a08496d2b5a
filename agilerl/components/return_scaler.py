"""Reward scaling by the running spread of the discounted return (PPO's ``normalize_rewards``).

Each env keeps a discounted return ``R_t = gamma * R_{t-1} + r_t`` (restarted
after every episode end); the rewards of a rollout are divided by the
standard deviation of every ``R_t`` seen so far and clipped to
``[-REWARD_CLIP, REWARD_CLIP]``, as SB3's ``VecNormalize(norm_reward=True)``
and gymnasium's ``NormalizeReward`` do. The mean is not subtracted, so the
sign of every reward and the optimal policy are kept.

The statistics (a :class:`~agilerl.networks.simba.RunningNorm` over the
returns) belong to the agent and go into its checkpoint; each env's running
return lives on the rollout buffer next to its episode trackers, because it
restarts where the envs do (a fresh buffer per member's turn, from env
resets). A rollout is merged into the statistics first and then scaled with
them as a whole (SB3 scales step by step as it merges).
"""

from __future__ import annotations

import numpy as np
import torch

from agilerl.networks.simba import RunningNorm

__all__ = ["REWARD_CLIP", "ReturnScaler"]

REWARD_CLIP = 10.0
"""Scaled rewards are clipped to ``[-REWARD_CLIP, REWARD_CLIP]``."""


class ReturnScaler:
    """Running variance of the discounted return, and the rewards it scales.

    Args:
        eps: Added to the variance before its square root.
        clip: Bound of the scaled rewards.
    """

    def __init__(self, eps: float = 1e-8, clip: float = REWARD_CLIP) -> None:
        self.stats = RunningNorm(1)
        self.eps = float(eps)
        self.clip = float(clip)

    @property
    def std(self) -> float:
        """The current divisor ``sqrt(var + eps)``."""
        return float(torch.sqrt(self.stats.var[0] + self.eps))

    def scale(
        self, rewards: np.ndarray, done: np.ndarray, returns: np.ndarray, gamma: float
    ) -> None:
        """Merge a rollout's discounted returns into the statistics, then scale its rewards.

        Args:
            rewards: ``[T, N]`` rewards, scaled in place.
            done: ``[T, N]`` episode ends (terminated or truncated) at each step.
            returns: ``[N]`` running discounted return of each env before the rollout;
                updated in place to the one after it.
            gamma: Discount factor.
        """
        running = returns.astype(np.float64)
        seen = np.empty(rewards.shape, dtype=np.float64)
        for t in range(rewards.shape[0]):
            running = running * gamma + rewards[t]
            seen[t] = running
            running[done[t]] = 0.0
        returns[:] = running
        self.stats.update(torch.from_numpy(seen.reshape(-1, 1)).float())
        np.clip(rewards / self.std, -self.clip, self.clip, out=rewards)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The statistics, as tensors (checkpoint data)."""
        return {k: v.clone() for k, v in self.stats.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.stats.load_state_dict(state)
