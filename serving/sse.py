"""Server-sent events: the only code that writes ``data: …\\n\\n``, and the ASGI answer that sends them.

The API layer turns typed backend chunks into OpenAI stream objects and hands them
here; an error after the first byte becomes one typed ``error`` event followed by
``[DONE]`` so that a client never hangs (a Responses API stream ends with its own
``response.failed`` instead: ``serving.responses_stream``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from serving.errors import CLIENT_LEFT, ShuttingDown

DONE = b"data: [DONE]\n\n"
_CUT_STREAM_END_S = 1.0  # how long ending a stream the server stopped may take


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def named_event(name: str, payload: dict[str, Any]) -> bytes:
    """An event with its type on an ``event:`` line too, as the Responses API streams them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def header_pairs(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """``headers`` as ASGI wants them (the answers here build no Starlette ``Response``)."""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


def error_event(body: dict[str, Any]) -> bytes:
    """``body`` is an OpenAI error body ``{"error": {...}}``; the openai client raises on it."""
    return event(body)


def cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any]) -> asyncio.Task[None]:
    """A watcher task that cancels ``task`` when the client disconnects (the request body
    already read); cancel the watcher once the answer is out."""

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        task.cancel(CLIENT_LEFT)  # how the work tells a client's leaving from a shutdown's cut

    return asyncio.ensure_future(watch())


def client_left(watcher: asyncio.Task[None]) -> bool:
    """Whether a :func:`cancel_on_disconnect` watcher saw the client go (rather than being cancelled)."""
    return watcher.done() and not watcher.cancelled()


def cut_chat_stream() -> bytes:
    """The end of a chat or completions stream the server stopped: an error event, then ``[DONE]``."""
    return error_event(ShuttingDown().body()) + DONE


async def _end_cut_stream(send: Send, head: list[tuple[bytes, bytes]] | None, ending: bytes) -> None:
    """End a stream the server stopped (shutting down) as any failed stream of its kind ends
    (``ending``), not with a chunked body cut mid-way (``head``: its headers, if not sent yet).
    Bounded: a client that stopped reading cannot hold the shutdown."""
    with contextlib.suppress(Exception, TimeoutError):
        async with asyncio.timeout(_CUT_STREAM_END_S):
            if head is not None:
                await send({"type": "http.response.start", "status": 200, "headers": head})
            await send(
                {
                    "type": "http.response.body",
                    "body": ending,
                    "more_body": True,
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class SSEAnswer:
    """A 200 ``text/event-stream`` answer: the head, one body message per event, the end.

    Starlette's ``StreamingResponse`` runs every stream in an anyio task group beside a task
    that listens for the client's disconnect (uvicorn speaks ASGI 2.3, so it takes that path);
    here one plain asyncio task does the listening and cancels the stream when the client
    goes away, which closes ``events`` and, through them, the upstream request.
    """

    __slots__ = ("cut_ending", "events", "headers")

    def __init__(
        self,
        events: AsyncIterator[bytes],
        headers: dict[str, str],
        cut_ending: Callable[[], bytes] = cut_chat_stream,
    ) -> None:
        """``cut_ending``: the last bytes of the stream when the server going down cuts it."""
        self.events, self.headers, self.cut_ending = events, headers, cut_ending

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.current_task()
        assert streaming is not None
        raw = [(b"content-type", b"text/event-stream; charset=utf-8"), *header_pairs(self.headers)]
        watcher = cancel_on_disconnect(receive, streaming)
        started = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": raw})
            started = True
            async for event in self.events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            streaming.uncancel()
            left = client_left(watcher)  # else cancelled from outside: the server is going down
            watcher.cancel()  # before the end is sent: its last send ends the request
            if not left:
                await _end_cut_stream(send, None if started else raw, self.cut_ending())
            # the client left: the stream is over, quietly
        finally:
            watcher.cancel()  # before anything here can yield: the last send ended the request
            closer = getattr(self.events, "aclose", None)
            if closer is not None:
                await closer()
