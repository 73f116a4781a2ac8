"""Prometheus metrics for the gateway, one registry per app.

Written by ``serving.gateway`` (per request: count, latency, TTFT, tokens) and by the
embedded engine's batcher (batch sizes); queue depth and engine token counts are read
from the backends at scrape time. Served on ``/metrics`` by ``serving.api.health``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
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
        self.shadow = Counter(
            "turnout_shadow_requests",
            "Shadow copies by outcome (match, differ, error, timeout, dropped, skipped)",
            ["route", "shadow", "outcome"],
            registry=self.registry,
        )
        self.shadow_similarity = Histogram(
            "turnout_shadow_similarity",
            "Normalized edit similarity of shadow vs primary answers",
            ["route", "shadow"],
            buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0),
            registry=self.registry,
        )
        self.attempts_failed = Counter(
            "turnout_attempts_failed",
            "Attempts on a variant that failed before the first byte and moved on (retry or fallback)",
            ["route", "variant", "status"],
            registry=self.registry,
        )
        self.breaker_open = Gauge(
            "turnout_circuit_open",
            "1 while a variant's circuit breaker is open or half-open",
            ["variant"],
            registry=self.registry,
        )
        self.route_version = Gauge(
            "turnout_route_version", "Route version in force", ["route"], registry=self.registry
        )
        self.rate_limited = Counter(
            "turnout_rate_limited", "Requests refused by per-key limits", ["key"], registry=self.registry
        )
        self.canary_actions = Counter(
            "turnout_canary_actions",
            "Canary verdicts acted on (promote, complete, rollback)",
            ["route", "action"],
            registry=self.registry,
        )
        self.variant_info = Gauge(
            "turnout_variant_info",
            "1 per variant; its labels say what serves it (join on variant)",
            ["variant", "kind", "engine", "vendor", "accelerator"],
            registry=self.registry,
        )
        if engine_stats is not None:
            self.registry.register(_EngineCollector(engine_stats))

    def batch_observer(self, variant: str) -> Callable[[int], None]:
        child = self.batch_size.labels(variant)
        return child.observe
