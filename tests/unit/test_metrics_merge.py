"""Ray Serve's /metrics: one page for every gateway replica, whichever replica a scrape reaches.

Each replica's registry counts only what it served; Serve's proxy sends each scrape to one
replica, so a Prometheus scraping the proxy saw counters jump between replicas' values.
"""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from serving.metrics import GatewayMetrics
from serving.metrics_merge import REPLICA_LABEL, merge_pages
from serving.ray_deployments import PAGE_STALE_S, TurnoutRateCounter


def page(requests: int, engine_tokens: float) -> str:
    metrics = GatewayMetrics(
        engine_stats=lambda: {"tiny": {"queue_depth": 1.0, "generated_tokens": engine_tokens}}
    )
    metrics.series("chat", "tiny", "chat").requests(200).inc(requests)
    metrics.series("chat", "tiny", "chat").latency.observe(0.25)
    metrics.batch_observer("tiny")(4)
    text: bytes = generate_latest(metrics.registry)
    return text.decode()


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def test_every_replicas_series_are_labelled_and_the_engines_shared_figures_appear_once() -> None:
    a, b = page(3, 40.0), page(5, 40.0)
    merged = merge_pages(a, {"r-a": a, "r-b": b}).decode()
    requests = samples(merged, "turnout_requests_total")
    assert sorted((labels[REPLICA_LABEL], value) for labels, value in requests) == [
        ("r-a", 3.0),
        ("r-b", 5.0),
    ]
    assert sum(value for _, value in requests) == 8.0  # what the two replicas served together
    latency = samples(merged, "turnout_request_latency_seconds_count")
    assert {labels[REPLICA_LABEL] for labels, _ in latency} == {"r-a", "r-b"}
    # The engine deployment's figures: every replica reads the same board, so once, unlabelled.
    assert samples(merged, "turnout_engine_generated_tokens_total") == [({"variant": "tiny"}, 40.0)]
    assert samples(merged, "turnout_queue_depth") == [({"variant": "tiny"}, 1.0)]
    assert samples(merged, "turnout_batch_size_count") == [({"variant": "tiny"}, 1.0)]
    assert merge_pages(a, {"r-a": a}).decode().count("# TYPE turnout_requests_total counter") == 1
    assert [labels for labels, _ in samples(merged, "turnout_batch_size_created")] == [{"variant": "tiny"}]


def test_label_values_pass_through_untouched_and_odd_replica_ids_are_escaped() -> None:
    metrics = GatewayMetrics()
    metrics.series("r", "a\u2028b\x85c", "chat").requests(200).inc()  # line breaks to splitlines()
    odd_route = 'we"ird\\route/with spaces,} and {braces}\nnewline'
    metrics.series(odd_route, "v", "chat").requests(200).inc(2)
    metrics.rejected.labels("chat", "400").inc()  # a family whose samples have other labels
    text = generate_latest(metrics.registry).decode()
    merged = merge_pages(text, {'r"1\\': text, "r2": text}).decode()
    requests = samples(merged, "turnout_requests_total")
    assert {labels["route"] for labels, _ in requests} == {odd_route, "r"}
    assert sorted(labels[REPLICA_LABEL] for labels, _ in requests if labels["route"] == odd_route) == [
        'r"1\\',
        "r2",
    ]
    assert {labels["variant"] for labels, _ in requests if labels["route"] == "r"} == {"a\u2028b\x85c"}


def test_the_counter_returns_every_live_replicas_page_and_forgets_gone_ones() -> None:
    now = [100.0]
    board = TurnoutRateCounter(clock=lambda: now[0])
    assert asyncio.run(board.metrics_pages("r-a", "a1")) == {"r-a": "a1"}
    now[0] += 3
    assert asyncio.run(board.metrics_pages("r-b", "b1")) == {"r-a": "a1", "r-b": "b1"}
    now[0] += PAGE_STALE_S - 1  # r-a last published PAGE_STALE_S + 2 s ago: gone
    assert asyncio.run(board.metrics_pages("r-b", "b2")) == {"r-b": "b2"}
    asyncio.run(board.publish_page("r-c", "c1"))  # a replica's periodic publish: nothing back
    assert asyncio.run(board.metrics_pages("r-b", "b3")) == {"r-b": "b3", "r-c": "c1"}
