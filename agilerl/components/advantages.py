"""Generalised advantage estimation: the one GAE every on-policy learner calls.

PPO (feed-forward and recurrent, one agent or a stacked population), IPPO
and LLM PPO all compute advantages here, so "GAE" means one thing:

``delta_t = r_t + gamma * c_t * V_{t+1} - V_t`` and
``A_t = delta_t + gamma * lambda * c_t * A_{t+1}``, with ``c_t`` 1 while the
episode goes on after step ``t`` and 0 where it ended, ``V_T`` the value of
the observation after the last step, and ``returns = A + V``. A truncated
episode's bootstrap value is folded into ``r_t`` by the caller (it knows
what truncation means for its data). The sums run in float64 and are stored
in the output's dtype; the loop runs backwards over time only, vectorised
over the other dimensions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["gae", "gae_torch"]


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    not_done: np.ndarray,
    last_value: Any,
    gamma: float,
    gae_lambda: float,
    *,
    out_advantages: np.ndarray | None = None,
    out_returns: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and returns of ``[T, ...]`` steps.

    Args:
        rewards: Rewards, truncation bootstraps already added.
        values: ``V`` of the observations acted on.
        not_done: True where the episode goes on after the step.
        last_value: ``V`` of the observation after the last step (``[...]``; 0 for
            an episode that ends at the last step).
        gamma: Discount.
        gae_lambda: GAE lambda.
        out_advantages: Where to write the advantages (e.g. a buffer's column
            slice); a new array of ``values``' dtype otherwise.
        out_returns: Where to write the returns; likewise.

    Returns:
        ``(advantages, returns)``.
    """
    advantages = np.empty_like(values) if out_advantages is None else out_advantages
    if values.shape[0] == 0:
        return advantages, np.add(advantages, values, out=out_returns)
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    next_values[-1] = last_value
    deltas = rewards + gamma * not_done * next_values - values
    decay = (gamma * gae_lambda) * not_done
    last = np.zeros(values.shape[1:], dtype=np.float32)
    for t in range(values.shape[0] - 1, -1, -1):
        last = deltas[t] + decay[t] * last
        advantages[t] = last
    returns = np.add(advantages, values, out=out_returns)
    return advantages, returns


def gae_torch(
    rewards: torch.Tensor,
    values: torch.Tensor,
    not_done: torch.Tensor,
    last_value: Any,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gae` on CPU tensors (e.g. IPPO's rollouts, LLM PPO's token values).

    Returns:
        ``(advantages, returns)`` as tensors of ``values``' dtype.
    """
    last = last_value.numpy() if isinstance(last_value, torch.Tensor) else last_value
    advantages, returns = gae(
        rewards.numpy(),
        values.detach().numpy(),
        not_done.numpy().astype(bool),
        last,
        gamma,
        gae_lambda,
    )
    return torch.from_numpy(advantages), torch.from_numpy(returns)
