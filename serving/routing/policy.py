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
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator


class WeightedTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: str
    weight: Annotated[float, Field(gt=0)] = 1.0


class RouteSpec(BaseModel):
    """What serves one public model name (weighted primaries; shadows and fallbacks come next)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: Annotated[list[WeightedTarget], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_variants(self) -> RouteSpec:
        names = [t.variant for t in self.targets]
        if len(set(names)) != len(names):
            raise ValueError(f"a variant appears twice in targets: {names}")
        return self


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
    return targets[-1].variant


def decide(route: str, spec: RouteSpec, key: str | None, random_point: float) -> Decision:
    """Choose the primary variant; ``random_point`` ∈ [0, 1) is used only when there is no key."""
    if len(spec.targets) == 1:
        return Decision(primary=spec.targets[0].variant)
    point = sticky_unit(route, key) if key else random_point
    return Decision(primary=pick_weighted(spec.targets, point))
