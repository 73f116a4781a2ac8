"""The benchmarks' paired statistics (bench/paired_stats.py): pure, seeded, no I/O."""

from __future__ import annotations

import math
import random
import statistics

from bench.paired_stats import median_interval, paired_median


def test_paired_median_is_the_median_of_round_by_round_differences() -> None:
    assert paired_median([0.60, 0.58, 0.90], [0.10, 0.08, 0.10]) == 0.5  # differences 0.5, 0.5, 0.8


def test_median_interval_brackets_the_median_and_narrows_with_more_pairs() -> None:
    rng = random.Random(7)
    few = [rng.gauss(1.0, 2.0) for _ in range(30)]
    many = [rng.gauss(1.0, 2.0) for _ in range(1000)]
    for values in (few, many):
        low, high = median_interval(values)
        assert low <= statistics.median(values) <= high
    assert median_interval(few) == median_interval(few)  # seeded: a report can be reproduced
    (few_low, few_high), (many_low, many_high) = median_interval(few), median_interval(many)
    assert many_high - many_low < (few_high - few_low) / 3


def test_median_interval_of_fewer_than_two_pairs_is_unknown() -> None:
    assert all(math.isnan(bound) for bound in median_interval([0.3]))
