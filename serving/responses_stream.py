"""A streamed Responses API answer: chat chunks in, OpenAI's typed events out.

Where it sits: the edge (``serving.api.openai_routes``) hands the gateway's chunks of a
streamed ``/v1/responses`` request to :func:`response_events`. The events are OpenAI's:
``response.created`` and ``response.in_progress``; per output item (``serving.responses_output``)
``response.output_item.added`` when its first piece arrives, then its deltas
(``response.output_text.delta`` after a ``response.content_part.added``,
``response.reasoning_text.delta``, ``response.function_call_arguments.delta``); at the end each
item's ``done`` events in output order, then ``response.completed`` (or ``response.incomplete``)
with the whole answer. Every event names its type on an ``event:`` line and carries its
``sequence_number``; there is no ``[DONE]``. A failure after the first event ends the stream
with ``response.failed``, holding the error and what had been produced.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from backends.base import Chunk
from serving import sse
from serving.errors import InternalError, ShuttingDown, TurnoutError
from serving.responses_output import (
    call_item,
    message_item,
    reasoning_item,
    reasoning_of,
    response_usage,
    status_of,
    text_part,
    token_logprobs,
)

log = logging.getLogger("turnout")


@dataclass(slots=True)
class _Item:
    """One output item being streamed: its kind, id, and what it has so far."""

    kind: str  # "message", "reasoning" or "function_call"
    item_id: str
    pieces: list[str] = field(default_factory=list)  # text, reasoning text, or argument pieces
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # a message's tokens', when asked
    call_id: str = ""
    name: str = ""

    def whole(self, status: str) -> dict[str, Any]:
        text = "".join(self.pieces)
        if self.kind == "message":
            return message_item(self.item_id, status, [text_part(text, self.logprobs)])
        if self.kind == "reasoning":
            return reasoning_item(self.item_id, status, text if status != "in_progress" else None)
        return call_item(self.item_id, status, self.call_id, self.name, text)


class ResponseEvents:
    """The numbered events of one response, and the items they have opened."""

    def __init__(self, started: dict[str, Any]) -> None:
        self.started = started
        self.rid = str(started["id"]).removeprefix("resp_")
        self.numbers = itertools.count()
        self.items: list[_Item] = []
        self.single: dict[str, int] = {}  # "message", "reasoning" → its output index
        self.calls: dict[int, int] = {}  # the chat delta's tool call index → output index
        self.failure: dict[str, Any] | None = None  # the failed response, once ``failed`` made it

    def emit(self, kind: str, **fields: Any) -> bytes:
        return sse.named_event(kind, {"type": kind, "sequence_number": next(self.numbers), **fields})

    def _open(self, item: _Item) -> tuple[int, list[bytes]]:
        self.items.append(item)
        at = len(self.items) - 1
        opened = [self.emit("response.output_item.added", output_index=at, item=item.whole("in_progress"))]
        if item.kind == "message":
            where = {"item_id": item.item_id, "output_index": at, "content_index": 0}
            opened.append(self.emit("response.content_part.added", **where, part=text_part("")))
        return at, opened

    def piece(self, kind: str, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[bytes]:
        """Text (``kind`` "message", with its tokens' ``logprobs`` when asked) or reasoning text
        ("reasoning") for the answer's one such item."""
        out: list[bytes] = []
        at = self.single.get(kind)
        if at is None:
            at, out = self._open(_Item(kind, f"{'msg' if kind == 'message' else 'rs'}_{self.rid}"))
            self.single[kind] = at
        item = self.items[at]
        item.pieces.append(delta)
        item.logprobs += logprobs or []
        where = {"item_id": item.item_id, "output_index": at, "content_index": 0}
        if kind == "message":
            tokens = logprobs or []
            return [*out, self.emit("response.output_text.delta", **where, delta=delta, logprobs=tokens)]
        return [*out, self.emit("response.reasoning_text.delta", **where, delta=delta)]

    def call(self, delta: dict[str, Any]) -> list[bytes]:
        """One tool call delta of a chat chunk (``index``, then ``id`` and ``function.name`` on
        its first, ``function.arguments`` pieces after)."""
        index = int(delta.get("index") or 0)
        function = delta.get("function") or {}
        out: list[bytes] = []
        at = self.calls.get(index)
        if at is None:
            call_id = str(delta.get("id") or f"call_{self.rid}_{index}")
            item = _Item(
                "function_call", f"fc_{call_id}", call_id=call_id, name=str(function.get("name") or "")
            )
            at, out = self._open(item)
            self.calls[index] = at
        item = self.items[at]
        arguments = str(function.get("arguments") or "")
        if arguments:
            item.pieces.append(arguments)
            where = {"item_id": item.item_id, "output_index": at}
            out.append(self.emit("response.function_call_arguments.delta", **where, delta=arguments))
        return out

    def chunk(self, chunk: Chunk) -> list[bytes]:
        out: list[bytes] = []
        reasoning = reasoning_of(chunk.extra)
        if reasoning is not None:
            out += self.piece("reasoning", reasoning)
        tokens = token_logprobs(chunk.logprobs)
        calls = (chunk.extra or {}).get("tool_calls")
        if chunk.text or (tokens and reasoning is None and not calls):  # the end's token (EOS) has no text
            out += self.piece("message", chunk.text, tokens)
        for delta in calls or []:
            out += self.call(delta)
        return out

    def failed(self, exc: TurnoutError) -> bytes:
        """``response.failed``: the error, and the items produced so far, left incomplete."""
        body = exc.body()["error"]
        error = {"code": body.get("code") or body.get("type") or "server_error", "message": body["message"]}
        produced = [item.whole("incomplete") for item in self.items]
        self.failure = {**self.started, "status": "failed", "error": error, "output": produced}
        return self.emit("response.failed", response=self.failure)

    def cut_by_shutdown(self) -> bytes:
        """How the stream ends when the server going down cuts it (``serving.sse.SSEAnswer``):
        as any failed response, not with chat's error event and ``[DONE]``."""
        return self.failed(ShuttingDown())

    def done(self, status: str) -> tuple[list[bytes], list[dict[str, Any]]]:
        """Each item's ``done`` events, in output order; and the items as the answer holds them.
        An answer with no output at all gets its empty message, as OpenAI answers."""
        out: list[bytes] = []
        if not self.items:
            _, out = self._open(_Item("message", f"msg_{self.rid}"))
        whole = []
        for at, item in enumerate(self.items):
            text = "".join(item.pieces)
            where: dict[str, Any] = {"item_id": item.item_id, "output_index": at}
            if item.kind == "message":
                where["content_index"] = 0
                tokens = item.logprobs
                out.append(self.emit("response.output_text.done", **where, text=text, logprobs=tokens))
                out.append(self.emit("response.content_part.done", **where, part=text_part(text, tokens)))
            elif item.kind == "reasoning":
                out.append(self.emit("response.reasoning_text.done", **where, content_index=0, text=text))
            else:
                arguments = {"name": item.name, "arguments": text}
                out.append(self.emit("response.function_call_arguments.done", **where, **arguments))
            whole.append(item.whole(status if item.kind == "message" else "completed"))
            out.append(self.emit("response.output_item.done", output_index=at, item=whole[-1]))
        return out, whole


async def response_events(
    chunks: AsyncIterator[Chunk],
    started: dict[str, Any],
    charge: Callable[[int], None] | None = None,
    *,
    numbered: ResponseEvents | None = None,
    keep: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    announced: bool = False,
) -> AsyncIterator[bytes]:
    """The stream of one response. ``started`` is its ``in_progress`` object
    (``serving.responses_output.response_object``); ``charge`` as on chat streams: the usage
    when it comes, else one token per delta delivered. ``numbered``: the events' numbering and
    items, when the caller needs them too (:meth:`ResponseEvents.cut_by_shutdown`); ``keep``
    stores the finished response before its last event is sent (``serving.api.stored_responses``);
    ``announced``: ``response.created`` and ``response.in_progress`` were sent already (a
    background run's, ``serving.api.background_responses``)."""
    events = numbered or ResponseEvents(started)
    if not announced:
        yield events.emit("response.created", response=started)
        yield events.emit("response.in_progress", response=started)
    finish: str | None = None
    usage = None
    delivered, charged = 0, False
    try:
        async for chunk in chunks:
            for event in events.chunk(chunk):
                yield event
            delivered += 1 if chunk.text or chunk.extra else 0
            if chunk.finish_reason is not None:
                finish, usage = chunk.finish_reason, chunk.usage
                if charge is not None and usage is not None:
                    charge(usage.total_tokens)
                    charged = True
    except Exception as exc:  # the upstream failed, or an adapter bug: the stream still ends typed
        if isinstance(exc, TurnoutError):
            yield events.failed(exc)
        else:
            log.exception("responses stream failed")
            yield events.failed(InternalError("internal error"))
        return
    finally:  # also when the client left (the generator is closed)
        if charge is not None and not charged and delivered:
            charge(delivered)
    status, incomplete = status_of(finish)
    closing, output = events.done(status)
    for event in closing:
        yield event
    counted = response_usage(usage) if usage is not None else None
    ended = {
        **started,
        "status": status,
        "incomplete_details": incomplete,
        "output": output,
        "usage": counted,
    }
    if keep is not None:
        await keep(ended)
    yield events.emit(
        "response.completed" if status == "completed" else "response.incomplete", response=ended
    )
