"""Action distributions as plain tensor functions (no ``torch.distributions`` objects).

``torch.distributions`` validates arguments and builds Python objects on every
call, which dominates the cost of acting with a tiny network. These functions
compute the same quantities directly. Each family provides:

* ``sample(params, greedy) -> (action, log_prob)``
* ``evaluate(params, action) -> (log_prob, entropy)``

Log-probabilities and entropies are summed over action dimensions, giving
shape ``[B]``.

Sampling draws from ``generator`` (an agent's own ``torch.Generator``; the
global RNG when ``None``). A sequence of generators gives each row of the
leading dimension its own (a stacked population, ``[N, B, ...]``): row ``i``
then receives exactly the numbers a ``[B, ...]`` draw from generator ``i``
would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_MASKED_LOGIT = -1e9


Generators = torch.Generator | Sequence[torch.Generator] | None


def random_like(
    x: torch.Tensor, fill: Callable[[torch.Tensor, torch.Generator | None], torch.Tensor],
    generator: Generators,
) -> torch.Tensor:  # fmt: skip
    """A tensor shaped like ``x`` filled in place by ``fill(tensor, generator)``.

    With a sequence of generators, row ``i`` of the leading dimension is
    filled by ``generator[i]``.
    """
    out = torch.empty_like(x)
    if generator is None or isinstance(generator, torch.Generator):
        fill(out, generator)
        return out
    if len(generator) != out.shape[0]:
        raise ValueError(f"{len(generator)} generators for {out.shape[0]} rows")
    for row, gen in zip(out, generator, strict=True):
        fill(row, gen)
    return out


def _exponential(t: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    return t.exponential_(generator=g)


def _normal(t: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    return t.normal_(generator=g)


def _uniform(t: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    return t.uniform_(generator=g)


def _exp_race(log_probs: torch.Tensor, generator: Generators = None) -> torch.Tensor:
    """Sample indices along the last dim: ``argmax(log p - log E)`` with ``E ~ Exp(1)``."""
    noise = random_like(log_probs, _exponential, generator)
    return (log_probs - noise.log_()).argmax(dim=-1)


def categorical_sample(
    logits: torch.Tensor, greedy: bool = False, generator: Generators = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from ``Categorical(logits=logits)`` (``[B, n]``); returns int64 ``[B]`` actions."""
    log_probs = torch.log_softmax(logits, dim=-1)
    action = log_probs.argmax(dim=-1) if greedy else _exp_race(log_probs, generator)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``action`` (``[B]``) under ``Categorical(logits)``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_evaluate(
    logits: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``action`` (``[B]``) and entropy under ``Categorical(logits)``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    log_prob = log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return log_prob, entropy


class MultiCategorical:
    """Independent categoricals over ``nvec`` (``MultiDiscrete``), from concatenated logits.

    Logits ``[B, sum(nvec)]`` are scattered into a padded ``[B, D, max(nvec)]``
    block (padding gets a large negative logit), so every dimension is handled
    by one vectorised op.
    """

    def __init__(self, nvec: list[int]) -> None:
        self.nvec = [int(n) for n in nvec]
        width = max(self.nvec)
        self.uniform = all(n == width for n in self.nvec)
        index = torch.zeros(len(self.nvec), width, dtype=torch.int64)
        mask = torch.zeros(len(self.nvec), width, dtype=torch.bool)
        offset = 0
        for d, n in enumerate(self.nvec):
            index[d, :n] = torch.arange(offset, offset + n)
            mask[d, :n] = True
            offset += n
        self.index = index
        self.pad_mask = ~mask
        self.width = width

    def _padded(self, logits: torch.Tensor) -> torch.Tensor:
        if self.uniform:
            return logits.reshape(logits.shape[0], len(self.nvec), self.width)
        if self.index.device != logits.device:
            self.index = self.index.to(logits.device)
            self.pad_mask = self.pad_mask.to(logits.device)
        padded = logits[:, self.index]
        return padded.masked_fill(self.pad_mask, _MASKED_LOGIT)

    def sample(
        self, logits: torch.Tensor, greedy: bool = False, generator: Generators = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``[B, D]`` (int64) and summed log-probability ``[B]``."""
        log_probs = torch.log_softmax(self._padded(logits), dim=-1)
        action = log_probs.argmax(dim=-1) if greedy else _exp_race(log_probs, generator)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1).sum(-1)
        return action, log_prob

    def evaluate(
        self, logits: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed log-probability and entropy (``[B]``) of actions ``[B, D]``."""
        log_probs = torch.log_softmax(self._padded(logits), dim=-1)
        log_prob = log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1).sum(-1)
        entropy = -(log_probs.exp() * log_probs).sum((-1, -2))
        return log_prob, entropy


def bernoulli_sample(
    logits: torch.Tensor, greedy: bool = False, generator: Generators = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent Bernoulli per dimension (``MultiBinary``); float 0/1 actions ``[B, D]``."""
    if greedy:
        action = (logits > 0).to(logits.dtype)
    else:
        uniform = random_like(logits, _uniform, generator)
        action = (uniform < torch.sigmoid(logits)).to(logits.dtype)
    log_prob = -F.binary_cross_entropy_with_logits(logits, action, reduction="none").sum(-1)
    return action, log_prob


def bernoulli_evaluate(
    logits: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probability and entropy of 0/1 actions under ``Bernoulli(logits)``."""
    action = action.to(logits.dtype)
    log_prob = -F.binary_cross_entropy_with_logits(logits, action, reduction="none").sum(-1)
    probs = torch.sigmoid(logits)
    entropy = F.binary_cross_entropy_with_logits(logits, probs, reduction="none").sum(-1)
    return log_prob, entropy


def gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, greedy: bool = False, generator: Generators = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Diagonal Gaussian with state-independent ``log_std`` (``[A]``); actions ``[B, A]``.

    (A stacked population passes ``[N, B, A]`` means and ``[N, 1, A]`` log-stds.)
    """
    if greedy:
        action = mean
        log_prob = (-log_std - _HALF_LOG_2PI).sum(-1).expand(mean.shape[:-1])
        return action, log_prob
    noise = random_like(mean, _normal, generator)
    action = mean + noise * log_std.exp()
    log_prob = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
    return action, log_prob


def gaussian_evaluate(
    mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probability of ``action`` and entropy under ``N(mean, exp(log_std)^2)``."""
    z = (action - mean) * torch.exp(-log_std)
    log_prob = (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1).expand(mean.shape[:-1])
    return log_prob, entropy
