"""Baselines for the bandit tests and benchmark: LinUCB and uniform random pulls."""

from __future__ import annotations

import numpy as np


class LinUCB:
    """Linear UCB on the ``K * d`` disjoint contexts: one ridge model, exact inverse updates."""

    def __init__(self, dim: int, alpha: float = 1.0, lamb: float = 1.0) -> None:
        self.alpha = alpha
        self.a_inv = np.eye(dim) / lamb
        self.b = np.zeros(dim)

    def pull(self, contexts: np.ndarray) -> int:
        theta = self.a_inv @ self.b
        width = np.sqrt(np.einsum("ki,ij,kj->k", contexts, self.a_inv, contexts))
        return int(np.argmax(contexts @ theta + self.alpha * width))

    def update(self, x: np.ndarray, reward: float) -> None:
        u = self.a_inv @ x
        self.a_inv -= np.outer(u, u) / (1.0 + x @ u)
        self.b += reward * x


def cumulative_regret(env, steps: int, policy: LinUCB | None, seed: int = 0) -> float:
    """Regret of LinUCB (or uniform random pulls when ``policy`` is None) over ``steps`` rows."""
    rng = np.random.default_rng(seed + 1)  # not the env's stream: iris rows are sorted by class
    contexts = env.reset(seed=seed)
    regret = 0.0
    for _ in range(steps):
        arm = int(rng.integers(env.arms)) if policy is None else policy.pull(contexts)
        chosen = contexts[arm]
        contexts, reward = env.step(arm)
        if policy is not None:
            policy.update(chosen, reward)
        regret += 1.0 - reward
    return regret
