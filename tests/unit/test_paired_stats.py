"""The benchmarks' paired statistics (bench/paired_stats.py): pure, seeded, no I/O."""

from __future__ import annotations

import math
import random
import statistics

from bench.paired_stats import median_interval, paired_median, verdict


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


def test_verdict_says_whether_the_interval_agrees_with_the_median() -> None:
    assert verdict(3.2, (3.05, 3.4), 3.0, higher_is_better=True) == "PASS"
    assert (
        verdict(3.2, (2.9, 3.4), 3.0, higher_is_better=True)
        == "PASS on the median (its interval crosses the line)"
    )
    assert (
        verdict(2.9, (2.5, 3.1), 3.0, higher_is_better=True)
        == "MISS on the median (its interval crosses the line)"
    )
    assert verdict(2.9, (2.5, 2.99), 3.0, higher_is_better=True) == "MISS"
    assert verdict(3.0, (3.0, 3.1), 3.0, higher_is_better=True) == "PASS"  # on the line is a pass


def test_verdict_for_a_ceiling_reads_the_interval_the_other_way() -> None:
    assert verdict(0.8, (0.58, 0.94), 1.0, higher_is_better=False) == "PASS"
    assert (
        verdict(0.88, (0.75, 1.06), 1.0, higher_is_better=False)
        == "PASS on the median (its interval crosses the line)"
    )
    assert verdict(1.2, (1.1, 1.3), 1.0, higher_is_better=False) == "MISS"
    assert verdict(1.0, (0.9, 1.0), 1.0, higher_is_better=False) == "PASS"


def test_verdict_without_an_interval_says_so() -> None:
    assert verdict(0.99, (math.nan, math.nan), 0.97, higher_is_better=True) == "PASS (no interval)"
