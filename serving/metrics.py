"""Prometheus metrics for the gateway, one registry per app.

Written by ``serving.gateway`` (per request: count, latency, TTFT, tokens) and by the
embedded engine's batcher (batch sizes); queue depth and engine token counts are read
from the backends at scrape time. Served on ``/metrics`` by ``serving.api.health``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32)


EngineStats = Callable[[], Mapping[str, Mapping[str, float]]]


class _EngineCollector(Collector):
    """Read at scrape time from the backends that keep their own counters (variant → stats)."""

    def __init__(self, stats: EngineStats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "turnout_queue_depth", "Requests waiting in a variant's queue", labels=["variant"]
        )
        generated = CounterMetricFamily(
            "turnout_engine_generated_tokens",
            "Tokens the engine decoded (cancelled work included)",
            labels=["variant"],
        )
        for variant, stats in self._stats().items():
            depth.add_metric([variant], stats.get("queue_depth", 0.0))
            if "generated_tokens" in stats:
                generated.add_metric([variant], stats["generated_tokens"])
        yield depth
        yield generated


class GatewayMetrics:
    def __init__(self, engine_stats: EngineStats | None = None) -> None:
        self.registry = CollectorRegistry()
        labels = ["route", "variant", "endpoint"]
        self.requests = Counter(
            "turnout_requests", "Requests handled", [*labels, "status"], registry=self.registry
        )
        self.latency = Histogram(
            "turnout_request_latency_seconds",
            "End-to-end request latency",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "turnout_time_to_first_token_seconds",
            "Time to the first streamed token",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "turnout_tokens", "Tokens processed", ["route", "variant", "kind"], registry=self.registry
        )
        self.batch_size = Histogram(
            "turnout_batch_size",
            "Sequences per engine batch",
            ["variant"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        if engine_stats is not None:
            self.registry.register(_EngineCollector(engine_stats))

    def batch_observer(self, variant: str) -> Callable[[int], None]:
        child = self.batch_size.labels(variant)
        return child.observe
