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

``prefix_affinity`` sends requests that begin alike to the same replica, so its engine's prefix
cache (vLLM's automatic prefix caching, TensorRT-LLM's KV reuse) serves their common start: the
caller passes a key made from the prompt's first characters (``serving.routing.prefix_key``);
replicas are ranked for it by rendezvous hashing (``sha256(key, replica name)``: adding or
removing a replica moves only the keys it gains or loses), and the first whose score is less
than ``max_imbalance`` above the least loaded replica's takes it (as Ray Serve LLM's prefix-aware
router weighs balance against locality): a hot prefix spills to the next replica in its ranking
rather than queueing on one. A request with no key falls back to ``power_of_two``.
"""

from __future__ import annotations

import hashlib
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
    name: str = ""  # what rendezvous hashing ranks it by (its URL): stable when others come or go
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


def ranking(pool: Sequence[ReplicaLoad], key: bytes) -> list[ReplicaLoad]:
    """``pool`` in rendezvous order for ``key``: the highest ``sha256(key, name)`` first."""

    def weight(load: ReplicaLoad) -> bytes:
        return hashlib.sha256(key + b"\0" + (load.name or str(load.index)).encode()).digest()

    return sorted(pool, key=weight, reverse=True)


def _by_affinity(pool: Sequence[ReplicaLoad], key: bytes, max_imbalance: float) -> int:
    scores = {load.index: score(load) for load in pool}
    least = min(scores.values())
    for load in ranking(pool, key):
        if scores[load.index] - least < max_imbalance:
            return load.index
    return min(pool, key=lambda load: scores[load.index]).index  # max_imbalance 0: the least loaded


def choose(
    loads: Sequence[ReplicaLoad],
    policy: BalancePolicy,
    random_pair: tuple[float, float],
    affinity: bytes | None = None,
    max_imbalance: float = 10.0,
) -> int:
    """The ``index`` of the replica that takes the next request.

    ``least_loaded``: the lowest score; ties are broken by the first draw (so equal
    replicas share sequential traffic evenly instead of the first taking it all).
    ``power_of_two``: two distinct replicas picked by the two draws; the lower score wins,
    the first pick on a tie. ``prefix_affinity``: the first replica in ``affinity``'s
    rendezvous ranking less than ``max_imbalance`` (requests) above the least loaded; without
    a key, ``power_of_two``.
    """
    if not loads:
        raise ValueError("no replicas to choose from")
    pool = [load for load in loads if load.healthy] or list(loads)
    n = len(pool)
    if n == 1:
        return pool[0].index
    if policy == "prefix_affinity" and affinity is not None:
        return _by_affinity(pool, affinity, max_imbalance)
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
