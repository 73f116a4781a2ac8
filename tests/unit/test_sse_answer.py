"""``serving.sse.SSEAnswer``: the ASGI answer every streamed completion goes out through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from serving.sse import SSEAnswer


class Client:
    """An ASGI server's side of one request: records what is sent, says 'disconnect' on cue."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self.receives = 0

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)


def test_the_head_every_event_and_the_end_go_out_in_order() -> None:
    async def events() -> AsyncIterator[bytes]:
        for text in ("a", "b"):
            yield f"data: {text}\n\n".encode()

    async def run() -> Client:
        client = Client()
        await SSEAnswer(events(), {"x-request-id": "r1"})({"type": "http"}, client.receive, client.send)
        return client

    client = asyncio.run(run())
    start, *bodies = client.sent
    assert start == {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"x-request-id", b"r1")],
    }
    assert [(m["body"], m["more_body"]) for m in bodies] == [
        (b"data: a\n\n", True),
        (b"data: b\n\n", True),
        (b"", False),
    ]


def test_a_client_that_leaves_ends_the_stream_quietly_and_closes_the_events() -> None:
    closed = asyncio.Event()

    async def run() -> tuple[Client, bool]:
        client = Client()
        first_sent = asyncio.Event()

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b"data: first\n\n"
                first_sent.set()
                await asyncio.sleep(30)  # an engine still generating
                yield b"data: never\n\n"
            finally:
                closed.set()

        answer = asyncio.ensure_future(SSEAnswer(events(), {})({"type": "http"}, client.receive, client.send))
        await first_sent.wait()
        client.gone.set()
        await asyncio.wait_for(answer, 5)  # returns, does not raise
        return client, answer.cancelled()

    client, cancelled = asyncio.run(run())
    assert not cancelled and closed.is_set()
    assert [m.get("body") for m in client.sent[1:]] == [b"data: first\n\n"]


def test_a_cancellation_from_outside_ends_the_stream_with_an_error_event() -> None:
    """The server going down (uvicorn cancels what its grace left running) used to cut the
    chunked body mid-way: now the stream ends as a failed one does, with the rest not sent."""

    async def events() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await asyncio.sleep(30)
        yield b"data: never\n\n"

    async def run() -> Client:
        client = Client()
        answer = asyncio.ensure_future(SSEAnswer(events(), {})({"type": "http"}, client.receive, client.send))
        await asyncio.sleep(0.05)
        answer.cancel()
        await answer  # ends, not cancelled: the answer was finished
        return client

    client = asyncio.run(run())
    bodies = [m.get("body") for m in client.sent[1:]]
    assert bodies[0] == b"data: first\n\n" and bodies[-1] == b""
    error, done = bodies[1].split(b"\n\n")[:2]
    assert b'"code":"shutting_down"' in error and done == b"data: [DONE]"
    assert client.sent[-1]["more_body"] is False


def test_a_responses_stream_cut_from_outside_ends_with_its_own_response_failed() -> None:
    """A Responses API client reads typed events and no [DONE]: the openai SDK raised on chat's
    error event. The cut ends as any failed response does, numbered on from the last event, with
    what had been produced."""
    from backends.base import Chunk
    from serving.responses_stream import ResponseEvents, response_events

    started = {"id": "resp_r1", "object": "response", "status": "in_progress", "output": []}

    async def chunks() -> AsyncIterator[Chunk]:
        yield Chunk("64")
        await asyncio.sleep(30)
        yield Chunk("0", "stop")

    async def run() -> Client:
        client = Client()
        numbered = ResponseEvents(started)
        events = response_events(chunks(), started, numbered=numbered)
        answer = asyncio.ensure_future(
            SSEAnswer(events, {}, numbered.cut_by_shutdown)({"type": "http"}, client.receive, client.send)
        )
        await asyncio.sleep(0.05)
        answer.cancel()
        await answer
        return client

    client = asyncio.run(run())
    body = b"".join(m.get("body", b"") for m in client.sent[1:]).decode()
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "[DONE]" not in body and events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "shutting_down"
    assert failed["output"][0]["content"][0]["text"] == "64" and failed["output"][0]["status"] == "incomplete"
