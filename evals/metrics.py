"""Scoring and confidence intervals for evals. Pure: randomness (the bootstrap's) is seeded by the caller.

Used by ``evals/runner.py`` on each answer and by the report. ``match`` scores one generated
answer against the expected one (``exact``, ``normalized``: case, whitespace and final
punctuation ignored, or ``regex``: the first group of a pattern found in the output compared
exactly); ``wilson_ci`` gives the interval of a proportion (right or wrong answers: it does
not collapse to 100–100% when every answer is right, as a bootstrap does), ``bootstrap_ci`` a
percentile bootstrap interval of any other mean.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Literal

Scoring = Literal["exact", "normalized", "regex"]
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text.strip().lower()).rstrip(".!?")


def match(output: str, expected: str, scoring: Scoring = "exact", pattern: str | None = None) -> bool:
    if scoring == "exact":
        return output.strip() == expected.strip()
    if scoring == "normalized":
        return normalize(output) == normalize(expected)
    if pattern is None:
        raise ValueError("regex scoring needs a pattern with one group")
    found = re.search(pattern, output)
    return found is not None and found.group(1) == expected.strip()


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def bootstrap_ci(
    values: Sequence[float], seed: int, resamples: int = 2000, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(mean([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * resamples)], means[min(resamples - 1, int((1 - tail) * resamples))]


def wilson_ci(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default): 200 of 200 right is 98.1–100%."""
    if n <= 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    return low, 1.0 if successes == n else min(1.0, centre + half)
