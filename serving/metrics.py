"""Prometheus metrics for the gateway, one registry per app.

Written by ``serving.gateway`` (per request: count, latency, TTFT, tokens) and by the
embedded engine's batcher (batch sizes); queue depth and engine token counts, and the
per-replica load of replica-set variants (``backends/replica_set.py``), are read from the
backends at scrape time. Served on ``/metrics`` by ``serving.api.health``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

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
    120.0,
    300.0,
    600.0,  # a non-streamed answer's default read timeout (openai_http)
    1200.0,
)
_PER_TOKEN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
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


@dataclass(frozen=True, slots=True)
class ReplicaFigures:
    """One replica of a replica-set variant, as its gauges show it (None: not known)."""

    replica: str
    url: str
    healthy: bool
    in_flight: int
    picked: int
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    # Under prefix_affinity: requests sent here because it took their prompt's start before.
    prefix_hits: int | None = None


ReplicaStats = Callable[[], Mapping[str, Sequence[ReplicaFigures]]]


class RequestSeries:
    """The series one (route, variant, endpoint) writes per request, looked up once.

    ``labels()`` validates and locks on every call; the request path writes four or five
    series per request, so :meth:`GatewayMetrics.series` hands out these children instead.
    """

    __slots__ = (
        "_labels",
        "_requests",
        "_statuses",
        "completion_tokens",
        "latency",
        "per_token",
        "prompt_tokens",
        "ttft",
    )

    def __init__(self, metrics: GatewayMetrics, route: str, variant: str, endpoint: str) -> None:
        self._requests = metrics.requests
        self._statuses: dict[int, Counter] = {}
        self.latency = metrics.latency.labels(route, variant, endpoint)
        self.ttft = metrics.ttft.labels(route, variant, endpoint)
        self.per_token = metrics.per_token.labels(route, variant, endpoint)
        self.prompt_tokens = metrics.tokens.labels(route, variant, "prompt")
        self.completion_tokens = metrics.tokens.labels(route, variant, "completion")
        self._labels = (route, variant, endpoint)

    def requests(self, status: int) -> Counter:
        child = self._statuses.get(status)
        if child is None:
            child = self._statuses[status] = self._requests.labels(*self._labels, str(status))
        return child


_REPLICA_GAUGES = (
    ("turnout_backend_requests_waiting", "Requests waiting in a replica's engine queue (its own metrics)"),
    ("turnout_backend_requests_running", "Requests a replica's engine is running (its own metrics)"),
    ("turnout_backend_kv_cache_usage", "Fraction of a replica's KV cache in use (its own metrics)"),
    ("turnout_backend_in_flight", "Requests this gateway has in flight to a replica"),
    ("turnout_backend_healthy", "1 while a replica answers its probes and calls, else 0"),
)


class _ReplicaCollector(Collector):
    """Per-replica load of replica-set variants (variant → replicas), read at scrape time."""

    def __init__(self, stats: ReplicaStats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        labels = ["variant", "replica"]
        waiting, running, kv, in_flight, healthy = (
            GaugeMetricFamily(name, doc, labels=labels) for name, doc in _REPLICA_GAUGES
        )
        picked = CounterMetricFamily(
            "turnout_backend_replica_requests", "Requests sent to a replica (retries included)", labels=labels
        )
        info = GaugeMetricFamily(
            "turnout_backend_replica_info", "1 per replica; its URL", labels=[*labels, "url"]
        )
        prefix_hits = CounterMetricFamily(
            "turnout_backend_prefix_hits",
            "Requests sent to a replica because it took their prompt's start before (prefix_affinity)",
            labels=labels,
        )
        for variant, replicas in self._stats().items():
            for figures in replicas:
                key = [variant, figures.replica]
                for family, value in (
                    (waiting, figures.waiting),
                    (running, figures.running),
                    (kv, figures.kv_usage),
                ):
                    if value is not None:
                        family.add_metric(key, value)
                in_flight.add_metric(key, figures.in_flight)
                healthy.add_metric(key, 1.0 if figures.healthy else 0.0)
                picked.add_metric(key, figures.picked)
                info.add_metric([*key, figures.url], 1.0)
                if figures.prefix_hits is not None:
                    prefix_hits.add_metric(key, figures.prefix_hits)
        yield from (waiting, running, kv, in_flight, healthy, picked, info, prefix_hits)


# Why serving.http_protocol ended a connection: a head past max_header_bytes (431), a head still
# incomplete at header_timeout_s (408), a connection that sent nothing by then (closed), a body
# idle for body_timeout_s (408), an answer unread for send_stall_timeout_s (dropped), bytes that
# are no HTTP request (400: bad framing, an invalid method or Content-Length).
CONNECTION_REFUSAL_REASONS = (
    "head_too_large",
    "head_timeout",
    "silent_connection",
    "body_timeout",
    "send_stall",
    "malformed_request",
)


class GatewayMetrics:
    def __init__(
        self, engine_stats: EngineStats | None = None, replica_stats: ReplicaStats | None = None
    ) -> None:
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
        self.per_token = Histogram(
            "turnout_time_per_output_token_seconds",
            "A finished stream's time per output token after its first, as its client read them: "
            "(last - first) / (tokens - 1), tokens from its usage (else its output chunks)",
            labels,
            buckets=_PER_TOKEN_BUCKETS,
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
            "Attempts on a variant that failed before the first byte (then a retry or fallback, if any)",
            ["route", "variant", "status"],
            registry=self.registry,
        )
        self.breaker_open = Gauge(
            "turnout_circuit_open",
            "1 while a variant's circuit breaker is open or half-open",
            ["variant"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "turnout_requests_in_flight",
            "Requests a route is serving now, from arrival to the end of their answer (a stream's "
            "last event); each prompt of a batched /v1/completions counts",
            ["route"],
            registry=self.registry,
        )
        self.background = Gauge(
            "turnout_background_responses",
            "Background /v1/responses runs of this gateway, waiting for a slot (queued) or running",
            ["state"],
            registry=self.registry,
        )
        self.batches_running = Gauge(
            "turnout_batches_running",
            "Batch API (/v1/batches) batches this gateway runs now",
            registry=self.registry,
        )
        self.batches_ended = Counter(
            "turnout_batches_ended",
            "Batch API batches by how they ended: completed, cancelled or expired by the gateway that "
            "ran them, failed when made (their input file had wrong lines)",
            ["status"],
            registry=self.registry,
        )
        for status in ("completed", "cancelled", "expired", "failed"):
            self.batches_ended.labels(status)
        self.batch_requests = Counter(
            "turnout_batch_requests",
            "Batch API requests this gateway ran, by outcome: completed (a 2xx answer kept), failed "
            "(another answer kept), expired (no answer when the batch's window ended)",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.batch_retries = Counter(
            "turnout_batch_retries",
            "Batch API requests sent again after a 429 (rate limit, full queue) or a 503",
            ["status"],
            registry=self.registry,
        )
        self.route_version = Gauge(
            "turnout_route_version", "Route version in force", ["route"], registry=self.registry
        )
        self.rejected = Counter(
            "turnout_rejected_requests",
            "Requests answered before a route was chosen (bad body, unknown model, no key, limits)",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.connection_refusals = Counter(
            "turnout_connection_refusals",
            "Connections the per-connection bounds ended before or while a request came in "
            "(server: max_header_bytes, header_timeout_s, body_timeout_s, send_stall_timeout_s)",
            ["reason"],
            registry=self.registry,
        )
        for reason in CONNECTION_REFUSAL_REASONS:  # each at 0 from the start, so rate() sees the first
            self.connection_refusals.labels(reason)
        self.rate_limited = Counter(
            "turnout_rate_limited", "Requests refused by per-key limits", ["key"], registry=self.registry
        )
        self.shared_limit_unreachable = Counter(
            "turnout_ratelimit_shared_unreachable",
            "Rate-limit decisions made per replica because the shared counter was unreachable",
            registry=self.registry,
        )
        self.canary_actions = Counter(
            "turnout_canary_actions",
            "Canary verdicts acted on (promote, complete, rollback)",
            ["route", "action"],
            registry=self.registry,
        )
        self.canary_eval_accuracy = Gauge(
            "turnout_canary_eval_accuracy",
            "Accuracy (0-1) a canary eval gate measured on a variant; dataset as name@version",
            ["route", "variant", "dataset"],
            registry=self.registry,
        )
        self.variant_info = Gauge(
            "turnout_variant_info",
            "1 per variant; its labels say what serves it (join on variant); spec: the deploy spec's name",
            ["variant", "kind", "engine", "vendor", "accelerator", "spec"],
            registry=self.registry,
        )
        self._series: dict[tuple[str, str, str], RequestSeries] = {}
        self._in_flight: dict[str, Gauge] = {}
        if engine_stats is not None:
            self.registry.register(_EngineCollector(engine_stats))
        if replica_stats is not None:
            self.registry.register(_ReplicaCollector(replica_stats))

    def series(self, route: str, variant: str, endpoint: str) -> RequestSeries:
        key = (route, variant, endpoint)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = RequestSeries(self, route, variant, endpoint)
        return found

    def route_in_flight(self, route: str) -> Gauge:
        """The route's in-flight child, looked up once (``labels()`` locks on every call)."""
        found = self._in_flight.get(route)
        if found is None:
            found = self._in_flight[route] = self.in_flight.labels(route)
        return found

    def count_connection_refusal(self, reason: str) -> None:
        """One connection ended by a bound of ``serving.http_protocol`` (on the event loop)."""
        self.connection_refusals.labels(reason).inc()

    def batch_observer(self, variant: str) -> Callable[[int], None]:
        child = self.batch_size.labels(variant)
        return child.observe
