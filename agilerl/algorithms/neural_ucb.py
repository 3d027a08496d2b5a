"""NeuralUCB: pull the arm with the highest upper confidence bound of a neural reward model."""

from __future__ import annotations

import torch

from agilerl.algorithms.core.bandit import NeuralBandit
from agilerl.arena.models.algorithms.neural_ucb import NeuralUCBSpec


class NeuralUCB(NeuralBandit):
    """Neural Upper Confidence Bound (Zhou et al., 2020).

    Pulls ``argmax_k f(x_k) + gamma * sigma(x_k)``, with ``sigma`` from the
    last-layer gradient features and the exact inverse covariance of
    :mod:`agilerl.algorithms.core.bandit`.
    """

    spec_class = NeuralUCBSpec

    def arm_scores(self, f: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """``f + gamma * sigma``."""
        return f + self.spec.gamma * sigma
