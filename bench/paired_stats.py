"""Paired comparisons for the benchmarks: a figure minus its reference, measured side by side.

Beside the request path, after it: ``gateway_overhead.py`` and ``real_backends.py`` measure
Turnout and the direct path in turns (rounds, or blocks of about a second) and report the
median of the paired differences, so that the machine's or the engine's drift between
minutes cancels. ``median_interval`` says how far that median could move with other samples
of the same pairs (a percentile bootstrap), which matters where the engine's own spread is
larger than the effect measured: vLLM-CPU's c=1 latency spans ~35-55 ms against a 1 ms target.
``verdict`` reads a target against both: a median on the right side of the line is a pass, and
the verdict says whether its interval is too.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence


def paired_median(values: Sequence[float], reference: Sequence[float]) -> float:
    """The median over rounds of each round's figure minus the reference's in the same round."""
    return statistics.median(a - b for a, b in zip(values, reference, strict=True))


def median_interval(
    differences: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A ``level`` percentile-bootstrap interval for the median of ``differences`` (NaNs when
    there are fewer than two); ``seed`` fixes the resampling, so a run's report is reproducible."""
    if len(differences) < 2:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    n = len(differences)
    medians = sorted(statistics.median(rng.choices(differences, k=n)) for _ in range(resamples))
    tail = (1.0 - level) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1.0 - tail) * resamples))]


def verdict(median: float, interval: tuple[float, float], line: float, *, higher_is_better: bool) -> str:
    """A target read on the median, saying whether its interval lies on the same side of ``line``.

    "PASS" / "MISS" when median and interval agree; "PASS on the median (its interval crosses
    the line)" (or MISS) when the interval reaches the other side; "(no interval)" when unknown.
    No commas: the benches print several verdicts on one comma-separated line.
    """
    if not higher_is_better:
        median, interval, line = -median, (-interval[1], -interval[0]), -line
    passed = median >= line
    word = "PASS" if passed else "MISS"
    low, high = interval
    if math.isnan(low) or math.isnan(high):
        return f"{word} (no interval)"
    if (low >= line) if passed else (high < line):
        return word
    return f"{word} on the median (its interval crosses the line)"
