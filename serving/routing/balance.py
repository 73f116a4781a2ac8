"""The pure choice among replicas of one variant: which replica takes the next request.

Sits below ``serving.gateway`` on the request path: once the route policy has named a
variant and that variant is a replica set (``backends/replica_set.py``), the set asks
:func:`choose` which replica serves. Nothing here does I/O, reads a clock or draws
randomness: the caller passes each replica's load (its own in-flight count plus the
engine figures ``backends/load_probe.py`` last scraped) and two uniform draws in [0, 1).

Score (lower is better)::

    score = waiting + running + in_flight                       # requests, all counted alike
          + kv_usage                                            # < 1: breaks ties only
          + KV_FULL_WEIGHT * max(0, kv_usage - KV_FULL_AT)      # near-full KV cache: steep penalty

``waiting`` / ``running`` / ``kv_usage`` are the engine's own figures (None when the engine
does not export them: they count as 0, and the in-flight count carries the decision).
``in_flight`` overlaps the engine's counts (our requests are among its running ones); the
overlap is the same kind of bias on every replica, and it keeps the choice responsive
between two scrapes. ``kv_usage`` is a fraction in [0, 1]: below ``KV_FULL_AT`` it only
orders replicas with equal request counts; above it, each 1% more adds one request's
worth (a full cache scores like ten extra requests), because new work there waits or
preempts. Unhealthy replicas are left out unless every replica is unhealthy.

``prefix_affinity`` keeps requests that begin alike on one replica, so its engine's prefix cache
(vLLM's automatic prefix caching, TensorRT-LLM's KV reuse) serves their common start: the caller
passes the replica that served the longest known start of this prompt
(``serving.routing.prefix_index``), and that replica takes the request unless it holds
``max_imbalance`` or more requests than the least loaded one (as Ray Serve LLM's prefix-aware
router weighs balance against locality); otherwise, or with no such replica, ``power_of_two``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

BalancePolicy = Literal["least_loaded", "power_of_two", "prefix_affinity"]

KV_FULL_AT = 0.9
KV_FULL_WEIGHT = 100.0


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica's load as the choice sees it."""

    index: int
    healthy: bool = True
    name: str = ""  # its URL: what ``prefix_affinity``'s preferred replica is named by
    in_flight: int = 0
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None


def score(load: ReplicaLoad) -> float:
    """The formula in the module docstring: requests in the replica, plus a KV-cache term."""
    total = (load.waiting or 0.0) + (load.running or 0.0) + load.in_flight
    if load.kv_usage is not None:
        kv = min(max(load.kv_usage, 0.0), 1.0)
        total += kv + KV_FULL_WEIGHT * max(0.0, kv - KV_FULL_AT)
    return total


def _slot(draw: float, n: int) -> int:
    """Map a draw in [0, 1) to 0..n-1 (clamped, so 1.0 or a bad draw stays in range)."""
    return min(n - 1, max(0, int(draw * n)))


def choose(
    loads: Sequence[ReplicaLoad],
    policy: BalancePolicy,
    random_pair: tuple[float, float],
    preferred: str | None = None,
    max_imbalance: float = 10.0,
) -> int:
    """The ``index`` of the replica that takes the next request.

    ``least_loaded``: the lowest score; ties are broken by the first draw (so equal
    replicas share sequential traffic evenly instead of the first taking it all).
    ``power_of_two``: two distinct replicas picked by the two draws; the lower score wins,
    the first pick on a tie. ``prefix_affinity``: the replica named ``preferred`` (by its
    ``name``) when it is healthy and less than ``max_imbalance`` requests above the least
    loaded; else ``power_of_two``.
    """
    if not loads:
        raise ValueError("no replicas to choose from")
    pool = [load for load in loads if load.healthy] or list(loads)
    n = len(pool)
    if n == 1:
        return pool[0].index
    if policy == "prefix_affinity" and preferred is not None:
        least = min(score(load) for load in pool)
        for load in pool:
            if load.name == preferred and score(load) - least < max_imbalance:
                return load.index
    first, second = random_pair
    if policy == "least_loaded":
        scores = [score(load) for load in pool]
        best = min(scores)
        ties = [load for load, s in zip(pool, scores, strict=True) if s == best]
        return ties[_slot(first, len(ties))].index
    i = _slot(first, n)
    j = _slot(second, n - 1)
    if j >= i:
        j += 1
    a, b = pool[i], pool[j]
    return b.index if score(b) < score(a) else a.index
