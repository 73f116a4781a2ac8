"""``serving.ray_drain.DrainGate``: a Ray Serve gateway replica refusing new requests while the
application drains, and ending those still running at the deadline. An ASGI app and its server's
side are functions here (Ray is not needed)."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import orjson

from serving.ray_drain import CANCEL_AFTER_S, DrainGate


class Server:
    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)


async def slow_app(scope: Any, receive: Any, send: Any) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:  # as the generation endpoints end what shutdown cancels
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"ended"})


def http(path: str) -> dict[str, Any]:
    return {"type": "http", "path": path}


async def test_new_requests_get_a_503_and_running_ones_are_ended_at_the_deadline() -> None:
    gate = DrainGate(slow_app)
    running = Server()
    task = asyncio.ensure_future(gate(http("/v1/chat/completions"), running.receive, running.send))
    await asyncio.sleep(0.01)
    assert gate.in_flight() == 1
    gate.drain(1.0)  # draining, before the deadline: new requests refused, the running one goes on
    late = Server()
    await gate(http("/v1/completions"), late.receive, late.send)
    start, body = late.sent
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    assert orjson.loads(body["body"])["error"]["code"] == "shutting_down"
    assert not task.done() and gate.in_flight() == 1
    gate.drain(CANCEL_AFTER_S)  # the deadline: cancelled, and it ends its answer itself
    await task
    assert running.sent[-1]["body"] == b"ended" and gate.in_flight() == 0


async def test_probes_and_scrapes_are_still_answered_while_draining() -> None:
    answered: list[str] = []

    async def quick_app(scope: Any, receive: Any, send: Any) -> None:
        answered.append(scope.get("path", scope["type"]))

    gate = DrainGate(quick_app)
    gate.drain(0.0)
    for path in ("/health", "/metrics"):
        await gate(http(path), Server().receive, Server().send)
    await gate({"type": "lifespan"}, Server().receive, Server().send)
    assert answered == ["/health", "/metrics", "lifespan"]
