"""metrics/summary.py's `linear_percentile` against np.percentile: the same float, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.metrics.summary import linear_percentile

QS = (0, 1, 10, 25, 33.3, 50, 66.7, 75, 90, 95, 99, 99.9, 99.99, 100, 12.345678)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e12, max_value=1e12),
                min_size=1, max_size=60),
       st.sampled_from(QS) | st.floats(min_value=0, max_value=100))
def test_linear_percentile_is_numpys(values, q):
    array = np.array(values, dtype=np.float64)
    assert _same(linear_percentile(np.sort(array).tolist(), q), float(np.percentile(array, q)))


def test_latencies_nan_and_infinity_are_numpys():
    rng = np.random.default_rng(7)
    cases = [rng.exponential(300.0, size=n) for n in (1, 2, 3, 7, 100, 2001)]
    cases += [np.round(rng.exponential(300.0, size=500), 1), np.full(9, 12.5), np.array([1.0, np.nan, 3.0]),
              np.array([1.0, np.inf, 2.0]), np.array([-np.inf, 1.0, np.inf]), np.array([0.0, -0.0, 5.0])]
    for array in cases:
        for q in QS:
            with np.errstate(invalid="ignore"):   # numpy warns of inf - inf, and answers NaN
                expected = float(np.percentile(array, q))
            assert _same(linear_percentile(np.sort(array).tolist(), q), expected), (array, q)
