"""A log-bucketed histogram with bounded relative error, for latency percentiles.

Bucket i holds values in (γ^(i-1), γ^i] with γ = (1+α)/(1-α); reporting
2γ^i/(γ+1) for it is within α of every value in it. With α = 0.5% memory
grows with the log of the value range, not with the number of samples.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from operator import mul


_SHORT = 16   # add_many buckets this many values one at a time


class LogHistogram:
    def __init__(self, relative_error: float = 0.005) -> None:
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self.counts: dict[int, int] = {}
        self.count = 0
        self.total = 0
        self.total_sq = 0          # Σ value² (exact integers): the standard deviation
        self.min: int | None = None
        self.max: int | None = None
        self.zeros = 0

    def add(self, value: int, count: int = 1) -> None:
        """Record `count` samples of `value`."""
        self.count += count
        self.total += value * count
        if count > 0:
            self.total_sq += value * value * count
            if self.min is None or value < self.min:
                self.min = value
            if self.max is None or value > self.max:
                self.max = value
        if value <= 0:
            self.zeros += count
            return
        index = math.ceil(math.log(value) / self._log_gamma)
        self.counts[index] = self.counts.get(index, 0) + count

    def add_many(self, values: list[int], count: int = 1) -> None:
        """Record `count` samples of each of `values`: the same counts as `add` per value, at a
        cost that grows with the buckets they span (sorting aside: linear on the mostly
        non-decreasing durations of a run of passes)."""
        values = sorted(values)
        self.count += len(values) * count
        self.total += sum(values) * count
        if values and count > 0:
            self.total_sq += sum(map(mul, values, values)) * count
            if self.min is None or values[0] < self.min:
                self.min = values[0]
            if self.max is None or values[-1] > self.max:
                self.max = values[-1]
        start = bisect_right(values, 0)
        if start:
            self.zeros += start * count
        log_gamma = self._log_gamma
        counts = self.counts
        if len(values) - start <= _SHORT:
            # A handful of passes (most runs): one bucket each, in the same (increasing) order,
            # costs less than the bisection's closure and key calls.
            log = math.log
            ceil = math.ceil
            for value in values[start:] if start else values:
                index = ceil(log(value) / log_gamma)
                counts[index] = counts.get(index, 0) + count
            return

        def bucket(value: int) -> int:   # non-decreasing in the value, as `values` are
            return math.ceil(math.log(value) / log_gamma)

        while start < len(values):
            index = bucket(values[start])
            end = bisect_right(values, index, lo=start, key=bucket)
            counts[index] = counts.get(index, 0) + (end - start) * count
            start = end

    def _value(self, index: int) -> float:
        return 2 * self._gamma**index / (self._gamma + 1)

    def _order_statistic(self, rank: int, ordered: list[tuple[int, int]]) -> float:
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for index, n in ordered:
            seen += n
            if rank < seen:
                return self._value(index)
        return self._value(ordered[-1][0])

    def percentile(self, q: float) -> float:
        """Like numpy's linear-interpolation percentile, on bucket representatives."""
        if self.count == 0:
            return math.nan
        ordered = sorted(self.counts.items())
        position = q / 100 * (self.count - 1)
        low = math.floor(position)
        low_value = self._order_statistic(low, ordered)
        if position == low:
            return low_value
        high_value = self._order_statistic(low + 1, ordered)
        return low_value + (high_value - low_value) * (position - low)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        """Population standard deviation (numpy's default, as vllm bench uses), exact."""
        if not self.count:
            return math.nan
        # n²·variance = n·Σv² - (Σv)², an exact integer.
        return math.sqrt(self.count * self.total_sq - self.total * self.total) / self.count
