"""Load scenarios as pure functions of elapsed time: how many simulated users, and when to stop.

Used by the locustfile's ``LoadTestShape`` every second. Every scenario is bounded by
``duration_s``; ``ramp`` also stops at the first step that breaks its SLO (the locustfile
judges each finished step with ``loadtests.stats.step_figures``).

- ``steady``/``soak``: ``users`` for the whole run (soak is meant for long, bounded runs).
- ``ramp``: ``step_users``, then ``step_users`` more every ``step_s``, up to ``users``.
- ``spike``: a quarter of ``users`` for the first third, all of them for the middle third,
  a quarter again for the last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

ScenarioName = Literal["steady", "ramp", "spike", "soak"]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: ScenarioName
    users: int
    duration_s: float
    step_users: int = 2
    step_s: float = 5.0

    def steps(self) -> int:
        """How many ramp steps fit (bounded by both ``users`` and ``duration_s``; at least one, which
        is judged only if it ends within the run: ``turnout loadtest`` refuses ``step_s > duration_s``)."""
        by_users = math.ceil(self.users / self.step_users)
        return max(1, min(by_users, int(self.duration_s // self.step_s)))

    def step_at(self, elapsed: float) -> int:
        return int(elapsed // self.step_s)


def users_at(scenario: Scenario, elapsed: float) -> int | None:
    """Users wanted ``elapsed`` seconds into the run; None when the run is over."""
    if elapsed >= scenario.duration_s:
        return None
    if scenario.name == "ramp":
        step = scenario.step_at(elapsed)
        if step >= scenario.steps():
            return None
        return min(scenario.users, scenario.step_users * (step + 1))
    if scenario.name == "spike":
        base = max(1, scenario.users // 4)
        return scenario.users if scenario.duration_s / 3 <= elapsed < 2 * scenario.duration_s / 3 else base
    return scenario.users


def spawn_rate(scenario: Scenario) -> float:
    """Users started (or stopped) a second: the scenario's peak, so that any change it asks for
    is made within the one-second tick. Locust stops users at the spawn rate too, so a rate of
    the users wanted now made a spike's fall from 16 users to 4 take three seconds at 4 a second."""
    return max(1.0, float(scenario.users))
