"""Exploration noise for deterministic policies, vectorised over sub-envs.

Both processes keep one row of state per sub-env (``vect_noise_dim`` rows) and
work in the policy's *normalised* action space (``[-1, 1]`` for bounded Box
actions), so ``std``/``sigma`` are fractions of the half action range.
:meth:`ExplorationNoise.reset` takes the indices of the sub-envs whose episode
ended; the others keep their state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["ExplorationNoise", "GaussianNoise", "OrnsteinUhlenbeckNoise", "make_noise"]


class ExplorationNoise:
    """Base of the exploration noise processes.

    Args:
        action_dim: Width of one (flattened) action.
        vect_noise_dim: Number of sub-envs (independent noise rows).
        mean: Mean of the noise.
        std: Scale of the noise.
        rng: Numpy generator (a fresh unseeded one when ``None``).

    Raises:
        ValueError: If ``action_dim`` or ``vect_noise_dim`` is below 1 or ``std`` is negative.
    """

    def __init__(
        self,
        action_dim: int,
        vect_noise_dim: int = 1,
        mean: float = 0.0,
        std: float = 0.1,
        rng: np.random.Generator | None = None,
    ) -> None:
        if int(action_dim) < 1 or int(vect_noise_dim) < 1:
            raise ValueError(
                f"action_dim and vect_noise_dim must be >= 1, got {action_dim}, {vect_noise_dim}"
            )
        if float(std) < 0.0:
            raise ValueError(f"Noise std must be >= 0, got {std}")
        self.action_dim = int(action_dim)
        self.vect_noise_dim = int(vect_noise_dim)
        self.mean = float(mean)
        self.std = float(std)
        self.rng = rng if rng is not None else np.random.default_rng()

    def sample(self, num_envs: int | None = None) -> np.ndarray:
        """Noise for one vector step, ``float32 [num_envs, action_dim]``.

        Args:
            num_envs: Rows wanted; a value other than ``vect_noise_dim`` resizes
                (and resets) the process to that many sub-envs.
        """
        raise NotImplementedError

    def reset(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Reset the state of the given sub-envs (all when ``None``)."""

    def _resize(self, num_envs: int | None) -> None:
        if num_envs is not None and int(num_envs) != self.vect_noise_dim:
            self.vect_noise_dim = int(num_envs)
            self._reset_all()

    def _reset_all(self) -> None:
        """Reinitialise the whole state (after a resize)."""


class GaussianNoise(ExplorationNoise):
    """Independent ``N(mean, std^2)`` noise every step (stateless)."""

    def sample(self, num_envs: int | None = None) -> np.ndarray:
        """Noise for one vector step, ``float32 [num_envs, action_dim]``."""
        self._resize(num_envs)
        noise = self.rng.standard_normal((self.vect_noise_dim, self.action_dim), np.float32)
        if self.std != 1.0:
            noise *= self.std
        if self.mean != 0.0:
            noise += self.mean
        return noise


class OrnsteinUhlenbeckNoise(ExplorationNoise):
    """Ornstein-Uhlenbeck process ``x += theta (mean - x) dt + std sqrt(dt) N(0, 1)``.

    The state of every sub-env starts (and is reset) at zero.

    Args:
        action_dim: Width of one (flattened) action.
        vect_noise_dim: Number of sub-envs.
        mean: Long-run mean the process reverts to.
        std: Diffusion scale ``sigma``.
        theta: Mean-reversion rate.
        dt: Time step.
        rng: Numpy generator.

    Raises:
        ValueError: For ``theta < 0`` or ``dt <= 0`` (and see :class:`ExplorationNoise`).
    """

    def __init__(
        self,
        action_dim: int,
        vect_noise_dim: int = 1,
        mean: float = 0.0,
        std: float = 0.1,
        theta: float = 0.15,
        dt: float = 1e-2,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(action_dim, vect_noise_dim, mean, std, rng)
        if float(theta) < 0.0 or float(dt) <= 0.0:
            raise ValueError(f"OU noise needs theta >= 0 and dt > 0, got {theta}, {dt}")
        self.theta = float(theta)
        self.dt = float(dt)
        self._decay = 1.0 - self.theta * self.dt
        self._drift = self.theta * self.dt * self.mean
        self._scale = self.std * math.sqrt(self.dt)
        self._reset_all()

    def _reset_all(self) -> None:
        self.state = np.zeros((self.vect_noise_dim, self.action_dim), dtype=np.float32)

    def sample(self, num_envs: int | None = None) -> np.ndarray:
        """Advance the process one step and return a copy of the new state."""
        self._resize(num_envs)
        step = self.rng.standard_normal(self.state.shape, np.float32)
        step *= self._scale
        state = self.state
        state *= self._decay
        state += step
        if self._drift != 0.0:
            state += self._drift
        return state.copy()

    def reset(self, env_indices: Iterable[int] | np.ndarray | None = None) -> None:
        """Zero the state of the given sub-envs (all when ``None``)."""
        if env_indices is None:
            self.state.fill(0.0)
            return
        idx = np.asarray(
            list(env_indices) if not isinstance(env_indices, np.ndarray) else env_indices
        )
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        if idx.size:
            self.state[idx.astype(np.int64)] = 0.0


def make_noise(
    ou_noise: bool,
    action_dim: int,
    vect_noise_dim: int = 1,
    mean: float = 0.0,
    std: float = 0.1,
    theta: float = 0.15,
    dt: float = 1e-2,
    rng: np.random.Generator | None = None,
) -> ExplorationNoise:
    """An :class:`OrnsteinUhlenbeckNoise` (``ou_noise``) or a :class:`GaussianNoise`."""
    if ou_noise:
        return OrnsteinUhlenbeckNoise(action_dim, vect_noise_dim, mean, std, theta, dt, rng)
    return GaussianNoise(action_dim, vect_noise_dim, mean, std, rng)
