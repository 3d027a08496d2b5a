"""Mean, spread and a confidence interval of a few numbers (episode returns, seeds of a sweep)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    """``mean``, sample ``std`` and a Student-t confidence interval of ``n`` values.

    With one value the std is 0 and the interval is undefined (``nan``).
    """

    mean: float
    std: float
    n: int
    ci_low: float
    ci_high: float
    level: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def render(self, spec: str = ".2f") -> str:
        """``mean ± std (95% CI [low, high], n=N)``."""
        text = f"{self.mean:{spec}} ± {self.std:{spec}}"
        if self.n > 1:
            pct = f"{self.level * 100:g}%"
            text += f" ({pct} CI [{self.ci_low:{spec}}, {self.ci_high:{spec}}], n={self.n})"
        else:
            text += f" (n={self.n}, no CI)"
        return text


def summarise(values: Sequence[float], level: float = 0.95) -> Summary:
    """Summarise finite ``values`` (non-finite ones are dropped).

    Raises:
        ValueError: If no finite value is left.
    """
    data = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if data.size == 0:
        raise ValueError("summarise needs at least one finite value")
    mean = float(data.mean())
    if data.size == 1:
        return Summary(mean, 0.0, 1, math.nan, math.nan, level)
    from scipy import stats

    std = float(data.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, df=data.size - 1)) * std / math.sqrt(data.size)
    return Summary(mean, std, int(data.size), mean - half, mean + half, level)
