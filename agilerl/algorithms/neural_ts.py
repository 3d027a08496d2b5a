"""NeuralTS: Thompson sampling from a Gaussian around a neural reward model."""

from __future__ import annotations

import torch

from agilerl.algorithms.core.bandit import NeuralBandit
from agilerl.arena.models.algorithms.neural_ts import NeuralTSSpec


class NeuralTS(NeuralBandit):
    """Neural Thompson Sampling (Zhang et al., 2021).

    Pulls ``argmax_k r_k`` with ``r_k ~ N(f(x_k), (gamma * sigma(x_k))^2)``,
    ``sigma`` as in :mod:`agilerl.algorithms.core.bandit`; the draws come
    from the agent's own seeded generator.
    """

    spec_class = NeuralTSSpec

    def arm_scores(self, f: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """One Gaussian draw per arm around ``f`` with standard deviation ``gamma * sigma``."""
        noise = torch.randn(f.shape, generator=self.generator).to(f.device)
        return f + self.spec.gamma * sigma * noise
