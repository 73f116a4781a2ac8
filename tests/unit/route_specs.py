"""Route specs and the admin API's version records, as the ``turnout routes`` tests build them."""

from __future__ import annotations

from typing import Any

from serving.routing.spec import RouteSpec


def spec_of(**data: Any) -> RouteSpec:
    return RouteSpec.model_validate(data)


AB = spec_of(targets=[{"variant": "a", "weight": 70}, {"variant": "b", "weight": 30}])


def rv(spec: RouteSpec, version: int, route: str = "chat", **extra: Any) -> dict[str, Any]:
    """One route version as ``GET /admin/routes/{name}`` answers it."""
    base = {"route": route, "version": version, "spec": spec.model_dump(mode="json"), "author": "cli:me"}
    return {**base, "created_at": 0.0, "reason": "", "action": "set", **extra}
