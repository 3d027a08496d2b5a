"""Mean, std and Student-t confidence intervals."""

from __future__ import annotations

import math

import pytest

from agilerl.logging.stats import summarise


def test_summary_of_three_values_matches_the_t_interval() -> None:
    stats = summarise([10.0, 20.0, 30.0])
    assert stats.mean == pytest.approx(20.0)
    assert stats.std == pytest.approx(10.0)
    # t(0.975, df=2) = 4.302653; half width = 4.302653 * 10 / sqrt(3)
    assert stats.half_width == pytest.approx(4.302653 * 10 / math.sqrt(3), rel=1e-5)
    assert stats.render() == "20.00 ± 10.00 (95% CI [-4.84, 44.84], n=3)"


def test_one_value_has_no_interval_and_non_finite_values_are_dropped() -> None:
    stats = summarise([float("nan"), 5.0, float("inf")])
    assert stats.n == 1 and stats.std == 0.0 and math.isnan(stats.ci_low)
    assert stats.render() == "5.00 ± 0.00 (n=1, no CI)"
    with pytest.raises(ValueError, match="at least one finite"):
        summarise([float("nan")])
