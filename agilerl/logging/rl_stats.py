"""Aggregate statistics of RL runs as the field reports them (Agarwal et al., NeurIPS 2021).

The interquartile mean (IQM) over runs, with a stratified bootstrap
confidence interval (percentile method), the median and mean likewise,
performance profiles and the probability of improvement: the method of the
``rliable`` library with its defaults (95% intervals, 50,000 resamples),
computed with numpy so that a sweep summary needs no further dependency.

Scores are ``(runs, tasks)`` arrays; a sweep of one env is one task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Interval",
    "aggregate",
    "bootstrap_interval",
    "iqm",
    "performance_profile",
    "probability_of_improvement",
]

REPS = 50_000
"""Bootstrap resamples (rliable's default)."""


def _scores(values: Sequence[float] | np.ndarray) -> np.ndarray:
    data = np.asarray(values, dtype=np.float64)
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[0] == 0:
        raise ValueError("scores are a (runs, tasks) array with at least one run")
    return data


def iqm(scores: Sequence[float] | np.ndarray, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean of the middle 50% of the scores (pooled over tasks).

    As ``scipy.stats.trim_mean(scores, 0.25)``: ``floor(n / 4)`` values are cut
    from each end of the ``n`` sorted scores.
    """
    data = np.asarray(scores, dtype=np.float64)
    if axis is None:
        data = np.sort(data.reshape(-1))
        cut = int(0.25 * data.size)
        return float(data[cut : data.size - cut].mean())
    data = np.sort(data, axis=axis)
    n = data.shape[axis]
    cut = int(0.25 * n)
    return np.take(data, range(cut, n - cut), axis=axis).mean(axis=axis)


def _median(data: np.ndarray, axis: int) -> np.ndarray:
    return np.median(data, axis=axis)


def _mean(data: np.ndarray, axis: int) -> np.ndarray:
    return data.mean(axis=axis)


AGGREGATES: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "iqm": lambda data, axis: iqm(data, axis=axis),
    "median": _median,
    "mean": _mean,
}
"""Aggregate name -> function of a ``(..., runs x tasks)`` array flattened on ``axis``."""


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap confidence interval."""

    value: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def render(self, spec: str = ".2f") -> str:
        """``value [low, high]`` (the interval is ``-`` for one run)."""
        if self.n < 2:
            return f"{self.value:{spec}} [-]"
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def bootstrap_interval(
    scores: Sequence[float] | np.ndarray,
    aggregate_fn: str = "iqm",
    *,
    reps: int = REPS,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """The aggregate of ``scores`` and its stratified bootstrap percentile interval.

    Each resample draws, for every task, as many runs as it has, with
    replacement (stratified by task); the interval is the ``(1 - level) / 2``
    and ``(1 + level) / 2`` quantiles of the resampled aggregates.

    Args:
        scores: ``(runs,)`` or ``(runs, tasks)`` final scores.
        aggregate_fn: ``"iqm"``, ``"median"`` or ``"mean"``.
        reps: Bootstrap resamples.
        level: Coverage of the interval.
        seed: Seed of the resampling.
    """
    data = _scores(scores)
    fn = AGGREGATES[aggregate_fn]
    value = float(fn(data.reshape(1, -1), 1)[0])
    runs, tasks = data.shape
    if runs < 2:
        return Interval(value, math.nan, math.nan, runs, level)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.take_along_axis(data[None].repeat(reps, 0), picks, axis=1)
    stats = fn(resampled.reshape(reps, -1), 1)
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return Interval(value, float(low), float(high), runs, level)


def aggregate(
    scores: Sequence[float] | np.ndarray, *, reps: int = REPS, seed: int = 0
) -> dict[str, Interval]:
    """IQM, median and mean of ``scores``, each with its 95% bootstrap interval."""
    return {name: bootstrap_interval(scores, name, reps=reps, seed=seed) for name in AGGREGATES}


def performance_profile(
    scores: Sequence[float] | np.ndarray, thresholds: Sequence[float] | np.ndarray
) -> np.ndarray:
    """The fraction of runs (over all tasks) whose score exceeds each threshold."""
    data = _scores(scores).reshape(-1)
    taus = np.asarray(thresholds, dtype=np.float64)
    return (data[None, :] > taus[:, None]).mean(axis=1)


def probability_of_improvement(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    reps: int = 2_000,
    seed: int = 0,
) -> Interval:
    """P(X > Y): the chance a run of setting X beats a run of Y, averaged over tasks.

    Per task it is the Mann-Whitney statistic ``P(x > y) + P(x = y) / 2`` over
    every pair of runs; the interval resamples the runs of both settings.
    """
    a, b = _scores(x), _scores(y)
    if a.shape[1] != b.shape[1]:
        raise ValueError("both settings need the same tasks")

    def prob(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # a: (..., n, tasks), b: (..., m, tasks)
        greater = (a[..., :, None, :] > b[..., None, :, :]).mean(axis=(-3, -2))
        ties = (a[..., :, None, :] == b[..., None, :, :]).mean(axis=(-3, -2))
        return (greater + 0.5 * ties).mean(axis=-1)

    value = float(prob(a, b))
    n, m = a.shape[0], b.shape[0]
    if n < 2 or m < 2:
        return Interval(value, math.nan, math.nan, min(n, m))
    rng = np.random.default_rng(seed)
    pa = np.take_along_axis(a[None].repeat(reps, 0), rng.integers(0, n, (reps, n, a.shape[1])), 1)
    pb = np.take_along_axis(b[None].repeat(reps, 0), rng.integers(0, m, (reps, m, b.shape[1])), 1)
    stats = prob(pa, pb)
    low, high = np.quantile(stats, [0.025, 0.975])
    return Interval(value, float(low), float(high), min(n, m))
