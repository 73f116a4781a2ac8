"""Scoring and confidence intervals for evals. Pure: randomness (the bootstrap's) is seeded by the caller.

Used by ``evals/runner.py`` on each answer and by the report. ``match`` scores one generated
answer against the expected one (``exact``, ``normalized``: case, whitespace and final
punctuation ignored, or ``regex``: the first group of a pattern found in the output compared
exactly); ``bootstrap_ci`` gives a percentile bootstrap interval of a mean.
"""

from __future__ import annotations

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
