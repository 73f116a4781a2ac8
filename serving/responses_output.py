"""The Responses API's answer: a ``response`` object, or its stream of typed events.

Where it sits: after the gateway has run a ``/v1/responses`` request down the chat path
(``serving.responses_protocol``), the edge (``serving.api.openai_routes``) shapes the chat
result here. One assistant ``message`` output item with one ``output_text`` part; a generation
cut by ``max_output_tokens`` is ``incomplete`` (reason ``max_output_tokens``), as OpenAI sends
it. A stream is OpenAI's event sequence (``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``
…, the three ``done`` events, then ``response.completed`` or ``response.incomplete``), each event
with its ``sequence_number``, and no ``[DONE]``; a failure after the first event ends it with
``response.failed`` carrying the error.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from backends.base import Chunk, Usage
from serving import sse
from serving.errors import TurnoutError
from serving.responses_protocol import ResponsesRequest

log = logging.getLogger("turnout")

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_usage(usage: Usage) -> dict[str, Any]:
    """Chat usage in the Responses API's names (cached and reasoning tokens: the upstream's)."""
    details = usage.details or {}
    cached = (details.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (details.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": usage.total_tokens,
    }


def _status(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    reason = _INCOMPLETE.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, status: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": parts}


def response_object(
    rid: str,
    model: str,
    created: int,
    wire: ResponsesRequest,
    *,
    status: str = "in_progress",
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    incomplete: dict[str, str] | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``response`` object, the request's settings echoed as OpenAI echoes them."""
    text = wire.text if wire.text and wire.text.get("format") else {"format": {"type": "text"}}
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": wire.instructions,
        "max_output_tokens": wire.max_output_tokens,
        "max_tool_calls": wire.max_tool_calls,
        "model": model,
        "output": output or [],
        "parallel_tool_calls": True if wire.parallel_tool_calls is None else wire.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": {"effort": (wire.reasoning or {}).get("effort"), "summary": None},
        "service_tier": wire.service_tier or "default",
        "store": False,  # nothing is kept: a GET of this id, or a previous_response_id, finds nothing
        "temperature": 1.0 if wire.temperature is None else wire.temperature,
        "text": text,
        "tool_choice": wire.tool_choice or "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0 if wire.top_p is None else wire.top_p,
        "truncation": wire.truncation or "disabled",
        "usage": usage,
        "user": wire.user,
        "metadata": wire.metadata or {},
    }


def response_body(
    rid: str, model: str, created: int, wire: ResponsesRequest, text: str, finish_reason: str, usage: Usage
) -> dict[str, Any]:
    """The whole answer of a request that was not streamed."""
    status, incomplete = _status(finish_reason)
    item = message_item(f"msg_{rid}", status, [text_part(text)])
    return response_object(
        rid,
        model,
        created,
        wire,
        status=status,
        output=[item],
        usage=response_usage(usage),
        incomplete=incomplete,
    )


async def response_events(
    chunks: AsyncIterator[Chunk],
    started: dict[str, Any],
    charge: Callable[[int], None] | None = None,
) -> AsyncIterator[bytes]:
    """The stream of one response. ``started`` is its ``in_progress`` object (:func:`response_object`);
    ``charge`` as on chat streams (``serving.api.openai_routes``): the usage when it comes, else
    one token per text delta delivered."""
    numbers = itertools.count()
    item_id = "msg_" + started["id"].removeprefix("resp_")
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}

    def emit(kind: str, **fields: Any) -> bytes:
        return sse.named_event(kind, {"type": kind, "sequence_number": next(numbers), **fields})

    yield emit("response.created", response=started)
    yield emit("response.in_progress", response=started)
    yield emit("response.output_item.added", output_index=0, item=message_item(item_id, "in_progress", []))
    yield emit("response.content_part.added", **where, part=text_part(""))
    texts: list[str] = []
    finish: str | None = None
    usage: Usage | None = None
    charged = False
    try:
        async for chunk in chunks:
            if chunk.text:
                texts.append(chunk.text)
                yield emit("response.output_text.delta", **where, delta=chunk.text, logprobs=[])
            if chunk.finish_reason is not None:
                finish, usage = chunk.finish_reason, chunk.usage
                if charge is not None and usage is not None:
                    charge(usage.total_tokens)
                    charged = True
    except Exception as exc:  # the upstream failed, or an adapter bug: the stream still ends typed
        if isinstance(exc, TurnoutError):
            body = exc.body()["error"]
        else:
            log.exception("responses stream failed")
            body = {"message": "internal error", "type": "internal_error", "code": None}
        error = {"code": body.get("code") or body.get("type") or "server_error", "message": body["message"]}
        partial = message_item(item_id, "incomplete", [text_part("".join(texts))])
        yield emit(
            "response.failed", response={**started, "status": "failed", "error": error, "output": [partial]}
        )
        return
    finally:  # also when the client left (the generator is closed)
        if charge is not None and not charged and texts:
            charge(len(texts))
    text = "".join(texts)
    status, incomplete = _status(finish)
    yield emit("response.output_text.done", **where, text=text, logprobs=[])
    yield emit("response.content_part.done", **where, part=text_part(text))
    item = message_item(item_id, status, [text_part(text)])
    yield emit("response.output_item.done", output_index=0, item=item)
    ended = {
        **started,
        "status": status,
        "incomplete_details": incomplete,
        "output": [item],
        "usage": response_usage(usage) if usage is not None else None,
    }
    yield emit("response.completed" if status == "completed" else "response.incomplete", response=ended)
