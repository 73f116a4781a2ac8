"""Route specs and the pure decision: which variant serves this request.

Sits between the API layer and ``serving.gateway``: the gateway passes the route's
spec, the request's stickiness key and a random draw; nothing here does I/O, reads the
clock or draws randomness itself, so every rule is unit-tested as values in, values out.
A request with a stickiness key is placed by weighted rendezvous hashing: each target scores
``-ln(u) / weight`` with ``u = sha256(route, key, variant) → (0, 1)`` and the lowest wins, so the
same key always lands on the same variant whatever order the targets are listed in, each
target gets its weight's share, and changing one target's weight (adding or removing one
included) moves only keys to or from that target. A request without a key takes the
cumulative-weight interval that holds its random draw.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from serving.routing.spec import RouteSpec, WeightedTarget

__all__ = ["Decision", "RouteSpec", "WeightedTarget", "decide", "pick_sticky", "pick_weighted"]


@dataclass(frozen=True, slots=True)
class Decision:
    primary: str
    fallbacks: tuple[str, ...] = ()
    shadows: tuple[str, ...] = ()


def pick_sticky(route: str, key: str, targets: list[WeightedTarget]) -> str:
    """The target that ``key`` always gets on ``route`` (weighted rendezvous hashing)."""
    keyed = hashlib.sha256(f"{route}\x00{key}\x00".encode())
    best, best_score = "", math.inf
    for target in targets:
        if target.weight <= 0:
            continue
        digest = keyed.copy()
        digest.update(target.variant.encode())
        unit = (int.from_bytes(digest.digest()[:8], "big") | 1) / 2.0**64  # in (0, 1]: ln never sees 0
        # -ln(unit) / weight, compared as its log: a tiny weight (1e-320) made it inf for every
        # target, and no target won (a 500 for every sticky request).
        drawn = -math.log(unit)
        score = math.log(drawn) - math.log(target.weight) if drawn > 0 else -math.inf
        if score < best_score:
            best, best_score = target.variant, score
    return best


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
        primary = pick_sticky(route, key, primaries) if key else pick_weighted(primaries, random_point)
    fallbacks = tuple(v for v in spec.fallbacks if v != primary)
    if not spec.shadows:
        return Decision(primary, fallbacks)
    shadows = tuple(s.variant for s in spec.shadows if shadow_point < s.sample_rate and s.variant != primary)
    return Decision(primary, fallbacks, shadows)
