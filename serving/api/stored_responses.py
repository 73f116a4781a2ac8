"""Stored Responses API answers at the edge: keep them, continue them, and serve them back.

Where it sits: ``serving.api.openai_routes`` asks :func:`recall` for a ``/v1/responses`` request
before it becomes the chat request the gateway runs (a ``previous_response_id``'s context, or a
``conversation``'s items, are read from the store into it), and the :class:`ResponseMemory` it
returns keeps the finished answer (``store`` not false, and the config's ``responses.store``
on) and adds its input and output items to its conversation, before the answer is returned or
the stream's last event sent, so a follow-up finds it at once, from any gateway on the store.
``GET``/``DELETE /v1/responses/{id}`` and ``GET …/input_items`` are served here. A stored answer
is its key's: another key, or an anonymous caller, is told it does not exist. The store holds it
for ``responses.retention_s``. The items and the context are made by ``serving.responses_context``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving import sse
from serving.api.errors import error_response
from serving.api.response_replay import starting_after, stream_again
from serving.api.state import AppState
from serving.auth import Principal
from serving.conversations import conversation_id_of, with_status
from serving.errors import ClientError, NotFound
from serving.responses_context import (
    StoredResponse,
    input_items,
    listed_items,
    page_limit,
    page_order,
    stored,
)
from serving.responses_input import unsupported
from serving.responses_protocol import NO_CONVERSATIONS, NO_STORE, ResponsesRequest
from serving.store.responses import RUNNING

log = logging.getLogger("turnout")

_ENDED = ("completed", "incomplete")  # an answer a conversation takes (not a failed or cancelled one)


@dataclass(slots=True)
class ResponseMemory:
    """One request's link to the store: the answer's id, whether it is kept, what it continued
    (``earlier``: a previous response's context, or a conversation's items) and its conversation."""

    state: AppState
    owner: str
    rid: str  # the response's own id after "resp_": random, never the client's x-request-id
    keep: bool
    earlier: list[dict[str, Any]]
    conversation: str | None
    wire_input: str | list[Any]  # the request's input, as sent: its items are stored with it
    written: bool = False  # kept once already: a later state replaces it, unless it was deleted

    async def remember(self, response: dict[str, Any]) -> None:
        """Add the finished ``response``'s input and output items to its conversation, and keep
        it (when it is to be kept; a background one's every state, each replacing the one
        before). A store that fails is logged and the answer then says ``store: false``: the
        answer itself is not lost for it."""
        items = input_items(self.wire_input, self.rid)
        now = time.time()
        settings = self.state.gateway.config.responses
        if self.conversation is not None and response.get("status") in _ENDED:
            added = with_status([*items, *response.get("output", [])])
            expires = now + settings.conversation_retention_s
            try:
                found = await asyncio.to_thread(
                    self.state.store.conversations.add, self.conversation, self.owner, added, expires
                )
            except Exception:
                log.exception("response %s not added to %s", response.get("id"), self.conversation)
            else:
                if found is None:
                    gone = "response %s not added to %s: the conversation was deleted meanwhile"
                    log.warning(gone, response.get("id"), self.conversation)
        if not self.keep:
            return
        record = stored(self.owner, now, response, items, self.earlier)
        expires = now + settings.retention_s
        try:
            await asyncio.to_thread(self.state.store.keep_response, record, expires, replacing=self.written)
            self.written = True
        except Exception:
            log.exception("response %s not stored", response.get("id"))
            response["store"] = False


def owner_of(principal: Principal) -> str:
    """Whose stored answers a caller reads: its key's own (not its name's, which a later key may
    take), or every anonymous caller's."""
    return principal.limit_key


async def recall(state: AppState, principal: Principal, wire: ResponsesRequest) -> ResponseMemory:
    """The request's memory; its ``previous_response_id``'s context, or its ``conversation``'s
    items, are set on ``wire``. A 404 when this key stored no such answer or conversation (or it
    expired), a 400 when this gateway stores none."""
    settings = state.gateway.config.responses
    owner = owner_of(principal)
    earlier: list[dict[str, Any]] = []
    conversation = conversation_id_of(wire.conversation)
    if wire.previous_response_id is not None:
        if not settings.store:
            raise unsupported(f"previous_response_id: {NO_STORE}", "previous_response_id")
        previous = await asyncio.to_thread(state.store.response, wire.previous_response_id, owner)
        if previous is None:
            raise NotFound(
                f"Previous response with id '{wire.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        if previous.response.get("status") in RUNNING:
            raise ClientError(
                f"Previous response with id '{wire.previous_response_id}' is still "
                f"{previous.response['status']}; continue it once it has finished",
                param="previous_response_id",
                code="previous_response_in_progress",
            )
        earlier = previous.context
    elif conversation is not None:
        if not settings.store:
            raise unsupported(f"conversation: {NO_CONVERSATIONS}", "conversation")
        found = await asyncio.to_thread(state.store.conversations.items, conversation, owner)
        if found is None:
            raise NotFound(
                f"Conversation with id '{conversation}' not found.",
                param="conversation",
                code="conversation_not_found",
            )
        earlier = found
    if wire.background and not settings.store:
        message = (
            "background: this gateway stores no responses (responses.store is false in its "
            "config), so a background response could not be read back; send it without background"
        )
        raise unsupported(message, "background")
    wire.continuing(earlier)
    keep = settings.store and wire.store is not False
    return ResponseMemory(state, owner, secrets.token_hex(12), keep, earlier, conversation, wire.input)


class _Streamed(Response):
    """An event stream where Starlette expects a ``Response``, which it only calls as an ASGI app."""

    def __init__(self, answer: sse.SSEAnswer) -> None:
        super().__init__()  # its head is never sent: the stream sends its own
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.answer(scope, receive, send)


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


async def stored_response(request: Request) -> Response:
    """``GET``/``DELETE /v1/responses/{id}``, ``GET …/input_items``, ``POST …/cancel``."""
    state: AppState = request.app.state.turnout
    principal = await state.access.client(
        request.headers.get("authorization"), request.headers.get("api-key")
    )
    response_id, _, rest = request.path_params["rest"].partition("/")
    if not state.gateway.config.responses.store:
        message = f"No response with id '{response_id}' is stored here: {NO_STORE} of previous_response_id"
        return error_response(NotFound(message, param="response_id", code="response_not_found"), {})
    action = (request.method, rest)
    if action not in (("GET", ""), ("DELETE", ""), ("GET", "input_items"), ("POST", "cancel")):
        return error_response(NotFound(f"No route {request.method} /v1/responses/{response_id}/{rest}"), {})
    owner = owner_of(principal)
    found = await asyncio.to_thread(state.store.response, response_id, owner)
    if found is None:
        message = f"No response with id '{response_id}' found (or it expired)."
        return error_response(NotFound(message, param="response_id", code="response_not_found"), {})
    if action == ("DELETE", ""):
        await asyncio.to_thread(state.store.drop_response, response_id, owner)
        state.background.stop(response_id)  # a run elsewhere stops within a second: its row is gone
        return _json({"id": response_id, "object": "response", "deleted": True})
    if action == ("POST", "cancel"):
        return await _cancel(state, found, owner)
    if rest == "input_items":
        return _json(_input_items_page(request, found))
    if request.query_params.get("stream", "false").lower() in ("true", "1"):
        after = starting_after(request.query_params.get("starting_after"))
        return _Streamed(sse.SSEAnswer(stream_again(state, found, owner, after), {}, lambda: b""))
    return _json(found.response)


def _input_items_page(request: Request, found: StoredResponse) -> dict[str, Any]:
    query = request.query_params
    limit, order = page_limit(query.get("limit")), page_order(query.get("order"))
    return listed_items(found.input_items, limit=limit, order=order, after=query.get("after"))


async def _cancel(state: AppState, found: StoredResponse, owner: str) -> Response:
    """``POST /v1/responses/{id}/cancel``: a running background response is cancelled (stopped
    here at once, on another gateway within a second); one that has ended is returned as it is."""
    if not found.response.get("background"):
        message = "Only background responses can be cancelled; this one was not sent with background: true"
        return error_response(ClientError(message, param="response_id", code="not_cancellable"), {})
    now = await asyncio.to_thread(state.store.cancel_response, found.response_id, owner)
    if now is None:  # deleted meanwhile
        message = f"No response with id '{found.response_id}' found (or it expired)."
        return error_response(NotFound(message, param="response_id", code="response_not_found"), {})
    if now.response.get("status") == "cancelled":
        state.background.stop(found.response_id)
    return _json(now.response)
