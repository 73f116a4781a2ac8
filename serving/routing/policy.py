"""Route specs and the pure decision: which variant serves this request.

Sits between the API layer and ``serving.gateway``: the gateway passes the route's
spec, the request's stickiness key and a random draw; nothing here does I/O, reads the
clock or draws randomness itself, so every rule is unit-tested as values in, values out.
Assignment is ``sha256(route, key) → [0, 1)`` so the same key always lands on the same
variant and moving weight moves only the keys it must.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from serving.routing.spec import RouteSpec, WeightedTarget

__all__ = ["Decision", "RouteSpec", "WeightedTarget", "decide", "pick_weighted", "sticky_unit"]


@dataclass(frozen=True, slots=True)
class Decision:
    primary: str
    fallbacks: tuple[str, ...] = ()
    shadows: tuple[str, ...] = ()


def sticky_unit(route: str, key: str) -> float:
    """Map (route, key) to a stable point in [0, 1)."""
    digest = hashlib.sha256(f"{route}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def pick_weighted(targets: list[WeightedTarget], point: float) -> str:
    """The target whose cumulative-weight interval holds ``point`` ∈ [0, 1)."""
    total = sum(t.weight for t in targets)
    threshold = point * total
    running = 0.0
    for target in targets:
        running += target.weight
        if threshold < running:
            return target.variant
    return next(t.variant for t in reversed(targets) if t.weight > 0)


def decide(
    route: str, spec: RouteSpec, key: str | None, random_point: float, shadow_point: float = 1.0
) -> Decision:
    """Choose the primary, the fallbacks to try after it, and the sampled shadows.

    ``random_point`` ∈ [0, 1) places a request that has no key; ``shadow_point`` ∈ [0, 1)
    samples shadows (a shadow with rate r gets the request when ``shadow_point < r``).
    """
    primaries = spec.primaries()
    if len(primaries) == 1:
        primary = primaries[0].variant
    else:
        point = sticky_unit(route, key) if key else random_point
        primary = pick_weighted(primaries, point)
    fallbacks = tuple(v for v in spec.fallbacks if v != primary)
    if not spec.shadows:
        return Decision(primary, fallbacks)
    shadows = tuple(s.variant for s in spec.shadows if shadow_point < s.sample_rate and s.variant != primary)
    return Decision(primary, fallbacks, shadows)
