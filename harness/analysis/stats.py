"""Small statistics for repeated sweep points.

`median_ci` gives the sample median and a distribution-free confidence interval for the
population median from order statistics (the binomial method, e.g. Conover, "Practical
Nonparametric Statistics", §3.2): with n independent values, the number below the true median is
Binomial(n, 1/2), so the interval [x_(k), x_(n-k+1)] (1-based order statistics) covers the median
with probability 1 - 2·P(B <= k-1).  We pick the largest k whose coverage still reaches the asked
confidence.  No distribution is assumed and nothing is random, so the same values always give the
same interval.  When n is too small for any k to reach the confidence (n <= 5 at 95 %), the
interval is the full range [min, max] — whose actual coverage, 1 - 2^(1-n), is then below the
asked level; `median_ci_coverage` reports the level actually achieved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _binom_cdf_half(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def _order_index(n: int, confidence: float) -> int:
    """Largest 1-based k with coverage(k) >= confidence, or 1 when none reaches it."""
    best = 1
    for k in range(1, n // 2 + 1):
        if 1.0 - 2.0 * _binom_cdf_half(k - 1, n) >= confidence:
            best = k
        else:
            break
    return best


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high) of `values`; see the module docstring for the interval."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError("median_ci needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = len(data)
    mid = n // 2
    median = data[mid] if n % 2 else (data[mid - 1] + data[mid]) / 2.0
    if n == 1:
        return median, data[0], data[0]
    k = _order_index(n, confidence)
    return median, data[k - 1], data[n - k]


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """Coverage actually achieved by `median_ci` for n values (1.0 - 2·P(B <= k-1))."""
    if n <= 1:
        return 0.0
    k = _order_index(n, confidence)
    return 1.0 - 2.0 * _binom_cdf_half(k - 1, n)
