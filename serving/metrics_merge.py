"""One ``/metrics`` page for every gateway replica of a Ray Serve application (pure).

Off the request path: Serve's proxy sends a scrape of ``/metrics`` to one gateway replica of its
choosing, whose own registry counted only the requests it served, so a Prometheus scraping the
proxy saw each counter jump between replicas' values. Under ``turnout serve --ray`` every
gateway replica publishes its page to the counter deployment (``serving.ray_deployments``), and
the replica a scrape reaches answers with :func:`merge_pages`: every replica's series, each
sample labelled ``gateway_replica`` (sum over it, as over pods), except the families that
describe the shared engine deployments (``SHARED_FAMILIES``), which every replica reads from
the same board and which appear once, unlabelled, from the answering replica.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

REPLICA_LABEL = "gateway_replica"  # not "replica": the replica-set gauges use that for backends
# Read by every gateway replica from the engines' shared reports (backends.ray_engine): the same
# figures on each, so once per page.
SHARED_FAMILIES = frozenset({"turnout_queue_depth", "turnout_engine_generated_tokens", "turnout_batch_size"})


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def merge_pages(own: str, pages: Mapping[str, str], shared: Collection[str] = SHARED_FAMILIES) -> bytes:
    """The exposition text of ``pages`` (replica id → its page) with every sample labelled by its
    replica, and of ``shared`` families only ``own``'s (the answering replica's page), as is."""
    merged: dict[str, Metric] = {}
    for family in text_string_to_metric_families(own):
        if family.name in shared:
            merged[family.name] = family
    for replica, text in sorted(pages.items()):
        for family in text_string_to_metric_families(text):
            if family.name in shared:
                continue
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            into.samples.extend(
                Sample(s.name, {**s.labels, REPLICA_LABEL: replica}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(merged.values())))
    page: bytes = generate_latest(registry)
    return page
