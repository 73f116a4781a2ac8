"""Batch runs across gateways on one store, in front of a fault upstream (``backends/fault.py``).

A batch cancelled through another gateway stops there within seconds (its requests in flight
fall to 0 long before the slow upstream would answer) and keeps the answers it had; a batch
whose gateway is killed is taken over once its beat is older than ``batches.orphan_s``, and
every line is answered exactly once; a gateway that shuts down hands its batch to another at
once; a batch whose 24 h window ends while it runs (its ``expires_at`` moved near in the store,
as the clock cannot be) ends ``expired``, its request in flight hung up and its lines never sent
in the error file as ``batch_expired`` (counted failed); a key's rate limit paces its batch
(refused lines wait and are sent again) instead of failing it; an upstream that stays
unavailable fails its lines after a bounded number of tries.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from backends.fault import FaultServer
from serving.batches import UNAVAILABLE_TRIES
from serving.launcher import Launched
from tests.integration.control_plane import (
    admin,
    eventually,
    fault_batch,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)

SLOW_MS = 8000


@pytest.fixture
def upstream() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


def _config(folder: Path, upstream: FaultServer, **batches: Any) -> Path:
    variants = {"slow": fault_variant(upstream, read_timeout=30.0)}
    routes = {"chat": {"targets": [{"variant": "slow"}]}}
    return write_config(folder / "gateway.yaml", variants, routes, batches=batches)


def _client(gateway: Launched, key: str = "anything") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def _ended(client: openai.OpenAI, batch_id: str, timeout: float = 30.0) -> Any:
    seen: list[Any] = []

    def ended() -> bool:
        try:  # a key's own batch may have spent its requests per minute: poll on
            seen.append(client.batches.retrieve(batch_id))
        except openai.RateLimitError:
            return False
        return seen[-1].status in ("completed", "failed", "expired", "cancelled")

    eventually(ended, timeout, interval=0.2)
    return seen[-1]


def _answered(client: openai.OpenAI, batch_id: str, count: int, timeout: float = 20.0) -> None:
    eventually(lambda: client.batches.retrieve(batch_id).request_counts.completed >= count, timeout)  # type: ignore[union-attr]


def _custom_ids(client: openai.OpenAI, file_id: str | None) -> list[str]:
    assert file_id is not None
    return [orjson.loads(line)["custom_id"] for line in client.files.content(file_id).content.splitlines()]


def _metric(*gateways: Launched, name: str, **labels: str) -> float:
    return sum(metric_value(gateway.url, name, **labels) for gateway in gateways)


def _in_flight(*gateways: Launched) -> float:
    return sum(metric_value(gateway.url, "turnout_requests_in_flight", route="chat") for gateway in gateways)


def test_a_batch_cancelled_through_another_gateway_stops_and_keeps_its_answers(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=2)
    with running_gateway(config) as first, running_gateway(config) as second:
        here, there = _client(first), _client(second)
        batch = fault_batch(here, ["latency=10", "latency=10"] + [f"latency={SLOW_MS}"] * 4)
        _answered(there, batch.id, 2)
        eventually(lambda: _in_flight(first, second) == 2, 5)  # the next two lines, slow
        assert _metric(first, second, name="turnout_batches_running") == 1
        cancelling = there.batches.cancel(batch.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
        stopped_after = eventually(lambda: _in_flight(first, second) == 0, 5)
        assert stopped_after < SLOW_MS / 1000 - 2  # stopped, not answered
        cancelled = _ended(here, batch.id, 10)
        assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
        assert cancelled.request_counts.completed == 2 and cancelled.request_counts.failed == 0
        assert cancelled.request_counts.total == 6
        assert _custom_ids(here, cancelled.output_file_id) == ["line-0", "line-1"]
        assert cancelled.error_file_id is None  # lines never sent are in neither file
        assert there.batches.cancel(batch.id).status == "cancelled"  # again: unchanged
        assert _metric(first, second, name="turnout_batches_running") == 0
        assert _metric(first, second, name="turnout_batches_ended_total", status="cancelled") == 1
        assert _metric(first, second, name="turnout_batch_requests_total", outcome="completed") == 2


def test_a_killed_gateways_batch_is_taken_over_and_each_line_answered_once(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=1, orphan_s=2.0)
    lines = 30
    with running_gateway(config) as doomed:
        batch = fault_batch(_client(doomed), ["latency=500"] * lines)
        _answered(_client(doomed), batch.id, 2)
        with running_gateway(config) as survivor:
            other = _client(survivor)
            os.kill(doomed.pid, signal.SIGKILL)  # nothing hands the batch back
            left = other.batches.retrieve(batch.id)
            assert left.status == "in_progress" and left.request_counts.completed < lines  # type: ignore[union-attr]
            done = _ended(other, batch.id)
            assert done.status == "completed" and done.request_counts.completed == lines, done
            assert _custom_ids(other, done.output_file_id) == [f"line-{n}" for n in range(lines)]
            assert done.error_file_id is None


def test_a_gateway_shutting_down_hands_its_batch_to_another_at_once(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=1, orphan_s=120.0)
    with contextlib.ExitStack() as both, contextlib.ExitStack() as first:
        both.callback(first.close)
        leaving = first.enter_context(running_gateway(config))
        batch = fault_batch(_client(leaving), ["latency=400"] * 6)
        _answered(_client(leaving), batch.id, 1)
        staying = both.enter_context(running_gateway(config))  # started after: it claimed nothing
        first.close()  # a graceful stop
        done = _ended(_client(staying), batch.id, 20)  # long before orphan_s
    assert done.status == "completed" and done.request_counts.completed == 6, done


def _window_ends_in(folder: Path, batch_id: str, seconds: float) -> None:
    with contextlib.closing(sqlite3.connect(folder / "routes.db")) as db, db:
        ends = time.time() + seconds
        moved = db.execute("UPDATE batches SET expires_at = ? WHERE id = ?", (ends, batch_id))
        assert moved.rowcount == 1


def test_a_batch_whose_window_ends_while_it_runs_expires_keeping_its_answers(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=1, orphan_s=120.0, max_running=1)
    with running_gateway(config) as first:
        client = _client(first)
        batch = fault_batch(client, ["latency=10", "latency=10"] + ["latency=25000"] * 3)
        _answered(client, batch.id, 2)
        late = fault_batch(client, ["ok"])  # waits: the gateway runs one batch at a time
    # Both handed back (a graceful stop); the next gateway reads their new ends. The first
    # batch's window ends while its third line is in flight (the gateway starts and, idle, looks
    # for batches within 5 s: well inside 15); the second's is over already.
    _window_ends_in(tmp_path, batch.id, 15.0)
    _window_ends_in(tmp_path, late.id, -1.0)
    upstream.reset_stats()
    with running_gateway(config) as second:
        client = _client(second)
        eventually(lambda: _in_flight(second) == 1, 15)  # line-2, which would take 25 s
        started = time.monotonic()
        done = _ended(client, batch.id, 20)
        assert time.monotonic() - started < 20  # stopped at the window's end, not answered
        assert done.status == "expired" and done.expired_at is not None, done
        assert done.request_counts.completed == 2 and done.request_counts.failed == 3, done
        assert done.request_counts.total == 5
        assert _custom_ids(client, done.output_file_id) == ["line-0", "line-1"]
        assert _unrun(client, done.error_file_id) == ["line-2", "line-3", "line-4"]
        eventually(lambda: _in_flight(second) == 0, 5)  # line-2 was hung up, not left running
        ended = _ended(client, late.id, 10)
        assert ended.status == "expired" and ended.request_counts.failed == 1, ended
        assert ended.output_file_id is None and _unrun(client, ended.error_file_id) == ["line-0"]
        assert _metric(second, name="turnout_batches_ended_total", status="expired") == 2
        assert _metric(second, name="turnout_batch_requests_total", outcome="expired") == 4
    assert upstream.stats()["requests"] == 1  # line-2 alone: nothing after the windows ended


def _unrun(client: openai.OpenAI, file_id: str | None) -> list[str]:
    """The custom ids in an error file, each a request never sent because the batch expired."""
    assert file_id is not None
    lines = [orjson.loads(line) for line in client.files.content(file_id).content.splitlines()]
    assert all(line["response"] is None and line["error"]["code"] == "batch_expired" for line in lines), lines
    return [line["custom_id"] for line in lines]


def test_a_keys_rate_limit_paces_its_batch_instead_of_failing_it(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=8)
    with running_gateway(config) as gateway:
        made = httpx.post(f"{gateway.url}/admin/keys", json={"name": "paced", "rpm": 60}, headers=admin())
        assert made.status_code == 201, made.text
        client = _client(gateway, made.json()["key"])
        # 60 at once (these two calls' among them), then one a second
        batch = fault_batch(client, ["ok"] * 62)
        done = _ended(client, batch.id, 40)
        assert done.status == "completed" and done.request_counts.completed == 62, done
        assert metric_value(gateway.url, "turnout_rate_limited_total", key="paced") >= 1
        assert _metric(gateway, name="turnout_batch_retries_total", status="429") >= 1
        assert _metric(gateway, name="turnout_batch_requests_total", outcome="completed") == 62


def test_with_key_limits_off_a_batch_leaves_its_keys_limit_to_its_live_requests(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=8, key_limits=False)
    with running_gateway(config) as gateway:
        made = httpx.post(f"{gateway.url}/admin/keys", json={"name": "paced", "rpm": 60}, headers=admin())
        assert made.status_code == 201, made.text
        client = _client(gateway, made.json()["key"])
        batch = fault_batch(client, ["ok"] * 62)  # two of the key's 60 requests this minute
        done = _ended(client, batch.id, 20)
        assert done.status == "completed" and done.request_counts.completed == 62, done
        assert _metric(gateway, name="turnout_batch_retries_total") == 0  # never paced
        assert metric_value(gateway.url, "turnout_rate_limited_total", key="paced") == 0
        answer = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content  # the key's own request: still within its minute


def test_an_upstream_that_stays_unavailable_fails_its_lines_after_bounded_tries(
    tmp_path: Path, upstream: FaultServer
) -> None:
    config = _config(tmp_path, upstream, concurrency=2)
    with running_gateway(config) as gateway:
        client = _client(gateway)
        batch = fault_batch(client, ["ok", "error=503,retry_after=0"])
        done = _ended(client, batch.id, 30)
        assert done.status == "completed" and done.request_counts.failed == 1, done
        assert _custom_ids(client, done.error_file_id) == ["line-1"]
        answer = orjson.loads(client.files.content(done.error_file_id).content)["response"]  # type: ignore[arg-type]
        assert answer["status_code"] == 503
        # Sent again, but not for ever (the variant's breaker answers some tries itself).
        assert 3 <= httpx.get(f"{upstream.url}/stats").json()["requests"] <= 1 + UNAVAILABLE_TRIES
        assert _metric(gateway, name="turnout_batch_retries_total", status="503") == UNAVAILABLE_TRIES - 1
        assert _metric(gateway, name="turnout_batch_requests_total", outcome="failed") == 1
        assert _metric(gateway, name="turnout_batches_ended_total", status="completed") == 1
