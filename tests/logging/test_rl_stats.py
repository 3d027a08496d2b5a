"""IQM, bootstrap intervals, profiles and probability of improvement, checked by hand.

The bootstrap is checked against the exact bootstrap distribution, enumerated
over every resample of a small set of runs: its 2.5% and 97.5% quantiles are
what 50,000 random resamples must find.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from agilerl.logging.rl_stats import (
    aggregate,
    bootstrap_interval,
    iqm,
    performance_profile,
    probability_of_improvement,
)

RETURNS = [12.0, 480.0, 95.0, 500.0, 210.0, 33.0, 350.0, 500.0]


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    # sorted: 12 33 95 210 350 480 500 500 -> cut 2 from each end -> mean(95, 210, 350, 480)
    assert iqm(RETURNS) == pytest.approx((95 + 210 + 350 + 480) / 4)
    assert iqm(RETURNS) == pytest.approx(stats.trim_mean(RETURNS, 0.25))
    # five runs: floor(5 / 4) = 1 cut from each end
    assert iqm([1.0, 2.0, 3.0, 10.0, 20.0]) == pytest.approx(5.0)
    assert iqm([7.0]) == 7.0


def _exact_interval(values: list[float], fn) -> tuple[float, float]:
    """The 95% percentile interval of the bootstrap distribution, every resample enumerated."""
    n = len(values)
    resampled = [
        fn(np.array([values[i] for i in pick])) for pick in itertools.product(range(n), repeat=n)
    ]
    return tuple(np.quantile(resampled, [0.025, 0.975]))


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        # the trimmed mean's exact bootstrap is the slow one (17 s): with the slow suite
        pytest.param("iqm", lambda a: stats.trim_mean(a, 0.25), marks=pytest.mark.slow),
        ("mean", np.mean),
        ("median", np.median),
    ],
)
def test_bootstrap_interval_matches_the_exact_bootstrap(name: str, fn) -> None:
    values = [3.0, 10.0, 11.0, 15.0, 40.0, 41.0]
    low, high = _exact_interval(values, fn)
    interval = bootstrap_interval(values, name, seed=1)
    assert interval.value == pytest.approx(float(fn(np.array(values))))
    spread = max(values) - min(values)
    assert interval.low == pytest.approx(low, abs=0.02 * spread)
    assert interval.high == pytest.approx(high, abs=0.02 * spread)
    assert interval.low <= interval.value <= interval.high


def test_intervals_narrow_with_more_seeds_and_vanish_for_equal_runs() -> None:
    rng = np.random.default_rng(0)
    few = bootstrap_interval(rng.normal(100, 20, 5), "iqm")
    many = bootstrap_interval(rng.normal(100, 20, 500), "iqm", reps=5_000)
    assert many.high - many.low < (few.high - few.low) / 2  # ~ 1 / sqrt(100) of it
    same = bootstrap_interval([42.0] * 6, "iqm")
    assert (same.value, same.low, same.high) == (42.0, 42.0, 42.0)
    assert bootstrap_interval([5.0], "iqm").render() == "5.00 [-]"


def test_stratified_bootstrap_resamples_within_each_task() -> None:
    """Two tasks on very different scales: resampling never mixes their runs."""
    scores = np.array([[1.0, 100.0], [1.0, 100.0], [1.0, 100.0]])
    interval = bootstrap_interval(scores, "mean")
    assert (interval.value, interval.low, interval.high) == (50.5, 50.5, 50.5)


def test_aggregate_gives_iqm_median_and_mean() -> None:
    out = aggregate(RETURNS, reps=2_000)
    assert set(out) == {"iqm", "median", "mean"}
    assert out["median"].value == pytest.approx(float(np.median(RETURNS)))
    assert out["mean"].value == pytest.approx(float(np.mean(RETURNS)))


def test_performance_profile_counts_runs_above_each_threshold() -> None:
    profile = performance_profile(RETURNS, [0.0, 100.0, 400.0, 500.0])
    assert profile.tolist() == [1.0, 5 / 8, 3 / 8, 0.0]


def test_probability_of_improvement_is_the_mann_whitney_statistic() -> None:
    x, y = [3.0, 5.0, 7.0], [1.0, 5.0, 6.0, 2.0]
    # pairs x > y: 3>{1,2}, 5>{1,2}, 7>{1,5,6,2} = 8; ties: 5=5 -> 1; 12 pairs
    assert probability_of_improvement(x, y).value == pytest.approx((8 + 0.5) / 12)
    u = stats.mannwhitneyu(x, y).statistic
    assert probability_of_improvement(x, y).value == pytest.approx(u / 12)
    chance = probability_of_improvement([10.0, 11.0, 12.0], [1.0, 2.0, 3.0])
    assert (chance.value, chance.low, chance.high) == (1.0, 1.0, 1.0)
