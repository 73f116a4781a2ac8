"""The route specs the route store's tests write (``tests/integration/test_route_store*.py``)."""

from __future__ import annotations

from serving.routing.spec import RouteSpec, ShadowTarget, WeightedTarget

AB = RouteSpec(targets=[WeightedTarget(variant="a", weight=70), WeightedTarget(variant="b", weight=30)])
ONLY_A = RouteSpec(targets=[WeightedTarget(variant="a")])
SHADOWED = RouteSpec(
    targets=[WeightedTarget(variant="b")],
    shadows=[ShadowTarget(variant="a", sample_rate=0.25)],
    fallbacks=["a"],
)
