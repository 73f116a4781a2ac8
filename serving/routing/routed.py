"""A route version in force and one request's routing under it: what ``serving.gateway`` decides
and the API handlers carry from choosing a variant to writing the answer's headers."""

from __future__ import annotations

from dataclasses import dataclass

from serving.routing.policy import Decision
from serving.routing.spec import RouteSpec


@dataclass(frozen=True, slots=True)
class ActiveRoute:
    """A route version in force: what the store holds, validated against this process's variants."""

    name: str
    version: int
    spec: RouteSpec
    created_at: float = 0.0


@dataclass(slots=True)
class Routed:
    """One request's routing: the route version, the decision, and the variant that served."""

    route: ActiveRoute
    decision: Decision
    served_by: str
    pinned: bool = False  # x-turnout-variant chose the variant: not a sample of the route's traffic
