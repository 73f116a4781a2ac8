"""Background Responses API runs (``background: true``) through the official ``openai`` client.

On the embedded engine: answered at once as ``queued``, polled to the same answer a foreground
request gets, added to its conversation when done. Against a slow fault upstream, with two
gateways on one store: a run is ``in_progress`` from either, a follow-up on it is refused until it
ends, a cancel through the other gateway stops it there within seconds (its in-flight gauge
falls to 0 long before the upstream would have answered) and stays final, a run past the
gateway's slots waits ``queued``, an upstream error ends one ``failed`` with it, a deleted run
does not come back, and a gateway that shuts down leaves its runs ``failed`` (``shutting_down``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import (
    eventually,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)
from tests.integration.keyed_clients import ROUTE, TINY

ASK: dict[str, Any] = {"model": "turnout-tiny", "max_output_tokens": 8, "temperature": 0}
SLOW = 8000  # ms the fault upstream sleeps before answering a run meant to be stopped


def _client(gateway: Launched) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="anything", max_retries=0)


def _ended(client: openai.OpenAI, response_id: str, timeout: float = 20.0) -> Any:
    found: list[Any] = []
    eventually(
        lambda: (
            found.append(client.responses.retrieve(response_id))
            or found[-1].status not in ("queued", "in_progress")
        ),
        timeout,
    )
    return found[-1]


def test_a_background_response_is_polled_to_the_answer_a_foreground_one_gets(tmp_path: Path) -> None:
    with running_gateway(write_config(tmp_path / "gateway.yaml", TINY, ROUTE)) as gateway:
        client = _client(gateway)
        queued = client.responses.create(input="12+34=", background=True, **ASK)
        assert queued.status == "queued" and queued.background is True and queued.output == []
        done = _ended(client, queued.id)
        foreground = client.responses.create(input="12+34=", **ASK)
        assert done.status == "completed" and done.output_text == foreground.output_text == "640"
        assert done.usage == foreground.usage and done.background is True
        assert client.responses.cancel(done.id).status == "completed"  # ended: returned as it is
        talk = client.conversations.create()
        in_talk = client.responses.create(input="05+05=", conversation=talk.id, background=True, **ASK)
        ended = _ended(client, in_talk.id)
        texts = [item.content[0].text for item in client.conversations.items.list(talk.id, order="asc")]  # type: ignore[union-attr]
        assert texts == ["05+05=", ended.output_text]
        with pytest.raises(openai.BadRequestError) as unstored:
            client.responses.create(input="hi", background=True, store=False, **ASK)
        assert "needs store: true" in unstored.value.message
        with pytest.raises(openai.BadRequestError) as not_background:
            client.responses.cancel(foreground.id)
        assert not_background.value.code == "not_cancellable"


def _slow_route_config(folder: Path, upstream: FaultServer, **responses: Any) -> Path:
    """A gateway config whose route ``chat`` is the fault ``upstream`` (30 s read timeout)."""
    variants = {"slow": fault_variant(upstream, read_timeout=30.0)}
    routes = {"chat": {"targets": [{"variant": "slow"}]}}
    return write_config(folder / "gateway.yaml", variants, routes, responses=responses)


@pytest.fixture
def two_gateways(tmp_path: Path) -> Iterator[tuple[Launched, Launched, FaultServer]]:
    """Two gateways on one store, each with one background slot, in front of one fault upstream."""
    with FaultServer() as upstream:
        config = _slow_route_config(tmp_path, upstream, background_max_running=1)
        with running_gateway(config) as first, running_gateway(config) as second:
            yield first, second, upstream


def _slow(client: openai.OpenAI, ms: int = SLOW) -> Any:
    return client.responses.create(
        model="chat", input="hi", background=True, extra_body={"x_fault": f"latency={ms}"}
    )


def test_a_cancel_through_another_gateway_stops_the_run_and_is_final(
    two_gateways: tuple[Launched, Launched, FaultServer],
) -> None:
    first, second = two_gateways[0], two_gateways[1]
    here, there = _client(first), _client(second)
    run = _slow(here)
    eventually(lambda: there.responses.retrieve(run.id).status == "in_progress", 5)
    with pytest.raises(openai.BadRequestError) as early:
        there.responses.create(model="chat", input="more", previous_response_id=run.id)
    assert early.value.code == "previous_response_in_progress"
    assert metric_value(first.url, "turnout_requests_in_flight", route="chat") == 1
    cancelled = there.responses.cancel(run.id)
    assert cancelled.status == "cancelled"
    stopped_after = eventually(
        lambda: metric_value(first.url, "turnout_requests_in_flight", route="chat") == 0, 5
    )
    assert stopped_after < SLOW / 1000 - 2  # stopped, not answered
    assert here.responses.retrieve(run.id).status == "cancelled"
    assert there.responses.cancel(run.id).status == "cancelled"  # again: the same
    deleted = _slow(here)
    eventually(lambda: here.responses.retrieve(deleted.id).status == "in_progress", 5)
    there.responses.delete(deleted.id)
    eventually(lambda: metric_value(first.url, "turnout_requests_in_flight", route="chat") == 0, 5)
    time.sleep(0.5)  # the run's end, had it been written, would be there by now
    with pytest.raises(openai.NotFoundError):
        here.responses.retrieve(deleted.id)


def test_runs_past_the_slots_wait_queued_and_errors_end_them_failed(
    two_gateways: tuple[Launched, Launched, FaultServer],
) -> None:
    first = two_gateways[0]
    client = _client(first)
    running, waiting = _slow(client, 1500), _slow(client, 10)
    eventually(lambda: client.responses.retrieve(running.id).status == "in_progress", 5)
    assert client.responses.retrieve(waiting.id).status == "queued"
    assert metric_value(first.url, "turnout_background_responses", state="queued") == 1
    assert _ended(client, running.id).status == "completed"
    assert _ended(client, waiting.id).status == "completed"
    broken = client.responses.create(
        model="chat", input="hi", background=True, extra_body={"x_fault": "error=400"}
    )
    failed = _ended(client, broken.id)
    assert failed.status == "failed" and failed.error is not None and failed.error.message
    assert metric_value(first.url, "turnout_background_responses") == 0


def test_a_background_stream_is_picked_up_again_after_the_last_event_the_client_had(tmp_path: Path) -> None:
    with running_gateway(write_config(tmp_path / "gateway.yaml", TINY, ROUTE)) as gateway:
        client = _client(gateway)
        stream = client.responses.create(input="12+34=", background=True, stream=True, **ASK)
        had = []
        for event in stream:
            had.append(event)
            if len(had) == 5:  # created, in_progress, item added, part added, the first delta
                break
        stream.close()  # the client leaves; the run goes on
        assert [event.sequence_number for event in had] == [0, 1, 2, 3, 4]
        assert had[0].type == "response.created" and had[0].response.status == "queued"
        response_id = had[0].response.id
        rest = list(client.responses.retrieve(response_id, stream=True, starting_after=4))
        assert [event.sequence_number for event in rest] == list(range(5, 5 + len(rest)))
        assert rest[-1].type == "response.completed"
        deltas = [event.delta for event in [*had, *rest] if event.type == "response.output_text.delta"]
        assert "".join(deltas) == client.responses.retrieve(response_id).output_text == "640"
        whole = list(client.responses.retrieve(response_id, stream=True))  # ended: from the store
        assert [event.sequence_number for event in whole] == list(range(len(had) + len(rest)))
        plain = client.responses.create(
            input="05+05=", background=True, **ASK
        )  # not streamed: its events too
        assert _ended(client, plain.id).status == "completed"
        assert list(client.responses.retrieve(plain.id, stream=True))[-1].type == "response.completed"
        foreground = client.responses.create(input="x", **ASK)
        with pytest.raises(openai.BadRequestError) as refused:
            list(client.responses.retrieve(foreground.id, stream=True))
        assert refused.value.code == "not_streamable"


def test_a_stream_is_picked_up_on_another_gateway_and_ends_when_cancelled(
    two_gateways: tuple[Launched, Launched, FaultServer],
) -> None:
    first, second = two_gateways[0], two_gateways[1]
    here, there = _client(first), _client(second)
    slowly = {"x_fault": "slow_chunks=200"}  # 8 chunks, 0.2 s apart
    stream = here.responses.create(model="chat", input="hi", background=True, stream=True, extra_body=slowly)
    had = [next(iter(stream)) for _ in range(5)]
    stream.close()
    response_id = had[0].response.id
    rest = list(there.responses.retrieve(response_id, stream=True, starting_after=had[-1].sequence_number))
    assert [event.sequence_number for event in rest] == list(range(5, 5 + len(rest)))
    assert rest[-1].type == "response.completed"
    deltas = [event.delta for event in [*had, *rest] if event.type == "response.output_text.delta"]
    assert "".join(deltas) == there.responses.retrieve(response_id).output_text
    run = _slow(here)
    eventually(lambda: there.responses.retrieve(run.id).status == "in_progress", 5)
    following = there.responses.retrieve(run.id, stream=True)
    assert next(iter(following)).type == "response.created"
    there.responses.cancel(run.id)
    last = list(following)[-1]
    assert last.type == "response.failed" and last.response.status == "cancelled"


def test_a_gateway_shutting_down_leaves_its_runs_failed(tmp_path: Path) -> None:
    with FaultServer() as upstream:
        config = _slow_route_config(tmp_path, upstream)
        with running_gateway(config) as survivor:
            with running_gateway(config) as leaving:
                run = _slow(_client(leaving))
                eventually(lambda: _client(survivor).responses.retrieve(run.id).status == "in_progress", 5)
            ended = _client(survivor).responses.retrieve(run.id)
            assert ended.status == "failed" and ended.error is not None
            assert ended.error.code == "shutting_down"  # type: ignore[comparison-overlap]


def test_a_run_whose_gateway_was_killed_is_failed_once_it_has_gone_silent(tmp_path: Path) -> None:
    with FaultServer() as upstream:
        config = _slow_route_config(tmp_path, upstream, background_orphan_s=2.0)
        with running_gateway(config) as survivor, running_gateway(config) as doomed:
            run = _slow(_client(doomed))
            other = _client(survivor)
            eventually(lambda: other.responses.retrieve(run.id).status == "in_progress", 5)
            following = other.responses.retrieve(run.id, stream=True)
            os.kill(doomed.pid, signal.SIGKILL)  # no shutdown: nothing ends its run
            assert other.responses.retrieve(run.id).status == "in_progress"  # not yet
            last = list(following)[-1]
            assert last.type == "response.failed" and last.response.error is not None
            assert last.response.error.code == "gateway_gone"  # type: ignore[comparison-overlap]
            ended = other.responses.retrieve(run.id)
            assert ended.status == "failed" and ended.error is not None
