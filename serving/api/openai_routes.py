"""``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, ``/v1/models``: the client's edge.

Reads and validates the body (size limit, JSON, OpenAI wire model), asks the gateway to
choose a variant and run the request, and writes the OpenAI response object or the SSE
stream. A Responses API request is read as a chat request (``serving.responses_protocol``)
and its answer shaped by ``serving.responses_output``; whole chat and completions answers are
written by ``serving.api.answer_bodies``. The generation endpoints are plain
ASGI apps (no FastAPI body machinery, no Starlette Request) because this is the hot path of
every request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from backends.base import Chunk, Completion, GenerateRequest
from serving import sse
from serving.api import background_responses as background
from serving.api.answer_bodies import chat_body, completion_body
from serving.api.errors import client_request_id, error_response
from serving.api.state import AppState
from serving.api.stored_responses import recall
from serving.api.wire_errors import parse_wire
from serving.auth import Principal
from serving.errors import (
    ClientClosedRequest,
    ClientError,
    Forbidden,
    InternalError,
    NotFound,
    PayloadTooLarge,
    ShuttingDown,
    TurnoutError,
)
from serving.gateway import SIBLING_FAILED
from serving.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields
from serving.responses_output import response_body, response_object
from serving.responses_protocol import ResponsesRequest, in_responses_terms
from serving.responses_stream import ResponseEvents, response_events
from serving.routing.routed import Routed

log = logging.getLogger("turnout")
Result = TypeVar("Result")
_FANOUT = 16  # prompts of one /v1/completions batch in flight at once
# A request to an upstream (non-streamed, or a stream before its first chunk) is watched for its
# client leaving from this age on.
WATCH_UPSTREAM_AFTER_S = 0.5


_READ_HEADERS = frozenset(
    {b"authorization", b"api-key", b"content-length", b"x-request-id", b"x-turnout-key", b"x-turnout-variant"}
)


def header_map(scope: Scope) -> dict[str, str]:
    """The headers this endpoint reads (the first of repeated ones), in one pass; the others
    (an SDK sends a dozen) are not decoded."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in reversed(scope["headers"])
        if name in _READ_HEADERS
    }


class JSONAnswer:
    """A 200 JSON answer as two ASGI messages, without building a Starlette Response."""

    __slots__ = ("body", "headers")

    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        self.body, self.headers = body, headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(self.body))]
        raw += sse.header_pairs(self.headers)
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole body, refused (413) as soon as it is known to exceed ``limit`` bytes."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientClosedRequest("the client closed the connection")
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


class _RequestIds:
    """Request ids of 32 hex digits (as ``uuid4().hex``): a random prefix per process, then a counter.

    Unique across gateway processes without a random draw (a syscall) per request; a forked
    child draws its own prefix."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_new_request_id = _RequestIds()


def request_id(sent: str | None) -> str:
    """The client's ``x-request-id`` when it is fit to echo (``client_request_id``), else a new one."""
    return client_request_id(sent) or _new_request_id()


async def _sse_events(
    chunks: AsyncIterator[Chunk],
    head: dict[str, Any],
    chat: bool,
    include_usage: bool,
    charge: Callable[[int], None] | None = None,
) -> AsyncIterator[bytes]:
    """Typed chunks → OpenAI stream objects; a mid-stream failure → error event, then [DONE].

    ``charge`` (a key's tokens-per-minute) gets the finish chunk's usage; a stream that ends
    without one (the client left, the upstream failed) is charged one token per text chunk it
    delivered, a lower bound, rather than nothing."""

    def choice(
        text: str | None,
        finish: str | None,
        logprobs: dict[str, Any] | None,
        fields: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if chat:
            delta = {} if text is None else {"content": text}
            if fields:  # tool_calls and the like, as the upstream shaped them
                delta.update(fields)
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}

    extra: dict[str, Any] = {"usage": None} if include_usage else {}
    if chat:
        first = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        yield sse.event({**head, "choices": [first], **extra})
    delivered, charged = 0, False
    try:
        async for chunk in chunks:
            logprobs = chunk.logprobs  # this chunk's tokens, on the event that carries their text
            # An upstream's own fields (vLLM's token_ids…) go on the event with this chunk's text,
            # or on its finish event; what the gateway writes wins.
            upstream_choice, upstream_answer = chunk.choice_extra or {}, chunk.response_extra or {}
            going_on = chunk.finish_reason is None
            delivering = chunk.text or chunk.extra or (going_on and logprobs is not None)
            if delivering or (going_on and (upstream_choice or upstream_answer)):
                delivered += 1 if delivering else 0
                text = chunk.text if chunk.text or not chunk.extra else None  # a bare tool-call delta
                answer = choice(text, None, logprobs, chunk.extra)
                if upstream_choice:
                    answer = {**upstream_choice, **answer}
                yield sse.event({**head, **upstream_answer, "choices": [answer], **extra})
                logprobs, upstream_choice, upstream_answer = None, {}, {}
            if not going_on:
                if charge is not None and chunk.usage is not None:
                    charge(chunk.usage.total_tokens)
                    charged = True
                last = {**upstream_choice, **choice(None, chunk.finish_reason, logprobs)}
                if chunk.stop_reason is not None:
                    last["stop_reason"] = chunk.stop_reason
                yield sse.event({**head, **upstream_answer, "choices": [last], **extra})
                if include_usage and chunk.usage is not None:
                    yield sse.event({**head, "choices": [], "usage": chunk.usage.as_dict()})
    except TurnoutError as exc:
        yield sse.error_event(exc.body())
    except Exception:  # an adapter bug must still end the stream cleanly
        log.exception("stream failed")
        yield sse.error_event(
            {"error": {"message": "internal error", "type": "internal_error", "param": None, "code": None}}
        )
    finally:  # also when the client left (the generator is closed)
        if charge is not None and not charged and delivered:
            charge(delivered)
    yield sse.DONE


async def unless_disconnected(receive: Receive, work: Awaitable[Result], watch_after_s: float) -> Result:
    """Await ``work``; if the client hangs up, cancel it (a 499), which also drops the upstream
    request, so vLLM or Triton stop generating too (the body is already read).

    Watching costs a task per request, so it starts only once the request is ``watch_after_s``
    old (0: at once): a quick answer never pays, and a long generation runs on at most that
    long after its client left. The watcher cancels this very task: no task wraps ``work``.
    """
    current = asyncio.current_task()
    assert current is not None  # an ASGI request always runs in a task
    watcher: asyncio.Task[None] | None = None

    def watch() -> None:
        nonlocal watcher
        watcher = sse.cancel_on_disconnect(receive, current)

    timer = asyncio.get_running_loop().call_later(watch_after_s, watch)
    try:
        return await work
    except asyncio.CancelledError:
        current.uncancel()  # handled here: the task goes on to answer
        if watcher is not None and sse.client_left(watcher):  # our own cancellation
            raise ClientClosedRequest("the client closed the connection") from None
        # From outside: the server is going down (uvicorn cancels what its graceful shutdown
        # left running). An OpenAI-shaped 503 rather than uvicorn's plain-text 500.
        raise ShuttingDown() from None
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()


async def _complete_all(
    state: AppState, routed: Routed, generates: list[GenerateRequest], endpoint: str
) -> list[Completion]:
    """Each prompt is its own gateway call (the embedded engine batches them), at most
    ``_FANOUT`` at once, and never more than the chosen variant queues; the first failure
    fails the request and cancels the rest."""
    if len(generates) == 1:
        return [await state.gateway.complete(routed, generates[0], endpoint)]
    queue_size = state.gateway.backends[routed.decision.primary].info.queue_size
    gate = asyncio.Semaphore(min(_FANOUT, queue_size or _FANOUT))

    async def one(generate: GenerateRequest) -> Completion:
        async with gate:
            return await state.gateway.complete(routed, generate, endpoint)

    tasks = [asyncio.ensure_future(one(generate)) for generate in generates]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:  # the client left: gather has cancelled the prompts (499s)
        raise
    except BaseException:  # one prompt failed: the others go, not counted as hang-ups
        for task in tasks:
            task.cancel(SIBLING_FAILED)
        raise


_WIRE: dict[str, type[SamplingFields]] = {
    "chat": ChatCompletionRequest,
    "completions": CompletionRequest,
    "responses": ResponsesRequest,
}


async def _serve(scope: Scope, receive: Receive, endpoint: str) -> Response | JSONAnswer | sse.SSEAnswer:
    state: AppState = scope["app"].turnout  # serving.app.GatewayApp
    headers_in = header_map(scope)
    rid = request_id(headers_in.get("x-request-id"))
    chat = endpoint == "chat"
    headers = {"x-request-id": rid}
    routed: Routed | None = None
    try:
        principal = await state.access.client(headers_in.get("authorization"), headers_in.get("api-key"))
        body = await read_body(receive, headers_in, state.max_body_bytes)
        wire = parse_wire(_WIRE[endpoint], body)
        wire.check()
        memory = await recall(state, principal, wire) if isinstance(wire, ResponsesRequest) else None
        generates = wire.to_generates(rid)
        if wire.stream and len(generates) > 1:
            raise ClientError(
                "streaming several prompts in one request is not supported; send one prompt per request",
                param="prompt",
                code="unsupported_value",
            )
        route = wire.model
        routed = choose(state, principal, headers_in, route, wire.user)
        headers["x-turnout-route-version"] = str(routed.route.version)
        created = int(time.time())
        backend = state.gateway.backends[routed.decision.primary]
        watch_after = 0.0 if backend.info.cancel_on_disconnect else WATCH_UPSTREAM_AFTER_S
        charge = partial(state.access.charge, principal) if principal.tpm is not None else None
        if isinstance(wire, ResponsesRequest) and wire.background and memory is not None:
            queued, following = await background.begin(
                state, memory, routed, generates[0], wire, created, charge
            )
            headers["x-turnout-variant"] = routed.served_by
            if following is not None:  # a client leaving stops the following, not the run
                return sse.SSEAnswer(following, headers, _no_ending)
            return JSONAnswer(orjson.dumps(queued), headers)
        if wire.stream:  # a client leaving before the first token is watched for too
            start = state.gateway.stream(routed, generates[0], endpoint)
            chunks = await unless_disconnected(receive, start, watch_after)
            headers["x-turnout-variant"] = routed.served_by
            if isinstance(wire, ResponsesRequest) and memory is not None:
                started = response_object(memory.rid, route, created, wire, stored=memory.keep)
                numbered = ResponseEvents(started)
                events = response_events(chunks, started, charge, numbered=numbered, keep=memory.remember)
                return sse.SSEAnswer(events, headers, numbered.cut_by_shutdown)
            head = {
                "id": f"{'chatcmpl' if chat else 'cmpl'}-{rid}",
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": route,
            }
            events = _sse_events(chunks, head, chat, wire.include_usage(), charge)
            return sse.SSEAnswer(events, headers)
        work = _complete_all(state, routed, generates, endpoint)
        results = await unless_disconnected(receive, work, watch_after)
        headers["x-turnout-variant"] = routed.served_by
        if charge is not None:
            charge(sum(result.usage.total_tokens for result in results))
        if isinstance(wire, ResponsesRequest) and memory is not None:
            answer = response_body(memory.rid, route, created, wire, results[0], stored=memory.keep)
            await memory.remember(answer)
            content = orjson.dumps(answer)
        elif chat:
            result = results[0]
            usage = result.usage.as_dict()
            content = chat_body(
                rid,
                route,
                created,
                result.text,
                result.finish_reason,
                usage,
                result.logprobs,
                result.message_extra,
                result.stop_reason,
                result.choice_extra,
                result.response_extra,
            )
        else:
            content = completion_body(rid, route, created, results)
        return JSONAnswer(content, headers)
    except TurnoutError as exc:
        if endpoint == "responses":
            exc = in_responses_terms(exc)
        return refused(state, exc, routed, headers, endpoint)
    except Exception:  # served ahead of FastAPI's error middleware, so render the 500 here
        log.exception("request %s failed", rid)
        return error_response(InternalError("internal error"), headers)


def _no_ending() -> bytes:
    """A background stream cut by this gateway going down just stops: its run writes its end,
    which the client reads on reconnecting (``starting_after``) to another gateway."""
    return b""


def choose(
    state: AppState, principal: Principal, headers_in: dict[str, str], route: str, user: str | None
) -> Routed:
    """The route's variant for this request; ``x-turnout-variant`` (an operator's) pins one."""
    pinned = headers_in.get("x-turnout-variant")
    if pinned is not None:  # a spec-backed variant may be named by its spec name too
        if principal.role not in ("operator", "admin"):  # clients take the route's split
            raise Forbidden(
                "x-turnout-variant (serving one variant of a route, for tests) needs an "
                "operator or admin token; a client key or an anonymous caller cannot pin",
                param="x-turnout-variant",
            )
        pinned = state.variant_aliases.get(pinned, pinned)
    return state.gateway.choose(route, headers_in.get("x-turnout-key"), user, pinned)


def refused(
    state: AppState, exc: TurnoutError, routed: Routed | None, headers: dict[str, str], endpoint: str
) -> Response:
    """The error answer; one refused before it had a route is counted as such."""
    if routed is not None:
        headers["x-turnout-variant"] = routed.served_by
    else:  # the route's own series count from here on; these have no route yet
        state.gateway.metrics.rejected.labels(endpoint, str(exc.status)).inc()
    return error_response(exc, headers)


class GenerationEndpoint:
    """The ASGI app of ``/v1/chat/completions`` or ``/v1/completions``.

    A plain ASGI callable, not a Starlette endpoint function: the router mounts it as it is
    (no Request object, no exception wrapper), and ``serving.app`` also serves it ahead of
    the middleware stack. Every error is rendered here, in the OpenAI shape.
    """

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint  # "chat", "completions" or "responses": also the metrics' label

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await _serve(scope, receive, self.endpoint)
        await response(scope, receive, send)


chat_completions = GenerationEndpoint("chat")
completions = GenerationEndpoint("completions")
responses = GenerationEndpoint("responses")


def _model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "turnout"}


async def list_models(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    await state.access.client(request.headers.get("authorization"), request.headers.get("api-key"))
    data = [_model_card(name, state.started) for name in state.gateway.route_names()]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


async def get_model(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    await state.access.client(request.headers.get("authorization"), request.headers.get("api-key"))
    name = request.path_params["model"]
    if name not in state.gateway.route_names():
        return error_response(NotFound(f"The model '{name}' does not exist", param="model"), {})
    return Response(orjson.dumps(_model_card(name, state.started)), media_type="application/json")
