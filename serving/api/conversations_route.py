"""``/v1/conversations``: OpenAI's Conversations API at the client's edge.

Where it sits: beside ``/v1/responses`` (``serving.api.stored_responses``), on the route store
(:attr:`serving.store.RouteStore.conversations`, in a worker thread). A client makes a
conversation (with up to 20 first items and metadata), reads, relabels and deletes it, and
adds, lists (a page at a time), reads and deletes its items; a ``/v1/responses`` request naming
it reads its items first and adds its own input and output. A conversation is its key's:
another key, or an anonymous caller, is told it does not exist. With ``responses.store: false``
in the config nothing is kept and every call is a 400 saying so. The shapes and checks are
``serving.conversations``'.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from serving.api.openai_routes import read_body
from serving.api.state import AppState
from serving.api.stored_responses import owner_of
from serving.api.wire_errors import parse_wire
from serving.conversations import (
    Conversation,
    ConversationUpdate,
    NewConversation,
    NewItems,
    conversation_items,
    deleted,
    new_conversation_id,
    refuse_include,
)
from serving.errors import NotFound
from serving.responses_context import listed_items, page_limit, page_order
from serving.responses_input import unsupported
from serving.responses_protocol import NO_CONVERSATIONS


def _json(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def _missing(conversation_id: str) -> NotFound:
    return NotFound(
        f"Conversation with id '{conversation_id}' not found.",
        param="conversation_id",
        code="conversation_not_found",
    )


async def _caller(request: Request) -> tuple[AppState, str, float]:
    """The app's state, whose conversations the caller reaches, and when a change now expires."""
    state: AppState = request.app.state.turnout
    headers = request.headers
    principal = await state.access.client(headers.get("authorization"), headers.get("api-key"))
    settings = state.gateway.config.responses
    if not settings.store:
        raise unsupported(NO_CONVERSATIONS, "conversation")
    return state, owner_of(principal), time.time() + settings.conversation_retention_s


async def _body(request: Request, state: AppState) -> bytes:
    return await read_body(request.receive, dict(request.headers), state.max_body_bytes)


async def create_conversation(request: Request) -> Response:
    """``POST /v1/conversations``."""
    state, owner, expires = await _caller(request)
    wire = parse_wire(NewConversation, await _body(request, state))
    items = conversation_items(wire.items or [])
    made = Conversation(new_conversation_id(), owner, time.time(), wire.metadata or {})
    await asyncio.to_thread(state.store.conversations.create, made, items, expires)
    return _json(made.as_dict())


async def conversation(request: Request) -> Response:
    """``/v1/conversations/{id}`` (GET, POST: its metadata, DELETE) and its ``items``."""
    state, owner, expires = await _caller(request)
    parts = request.path_params["rest"].split("/")
    conversation_id, method = parts[0], request.method
    store = state.store.conversations
    if len(parts) == 1:
        if method == "GET":
            found = await asyncio.to_thread(store.get, conversation_id, owner)
        elif method == "POST":
            change = parse_wire(ConversationUpdate, await _body(request, state))
            found = await asyncio.to_thread(store.update, conversation_id, owner, change.metadata, expires)
        else:
            if not await asyncio.to_thread(store.drop, conversation_id, owner):
                raise _missing(conversation_id)
            return _json(deleted(conversation_id))
        if found is None:
            raise _missing(conversation_id)
        return _json(found.as_dict())
    if parts[1] != "items" or len(parts) > 3 or (len(parts) == 2 and method == "DELETE"):
        raise NotFound(f"No route {method} /v1/conversations/{request.path_params['rest']}", code="not_found")
    refuse_include(request.query_params.getlist("include"))
    if len(parts) == 2:
        return _json(await _items(request, state, owner, conversation_id, expires))
    return await _item(state, owner, conversation_id, parts[2], method == "DELETE", expires)


async def _items(
    request: Request, state: AppState, owner: str, conversation_id: str, expires: float
) -> dict[str, Any]:
    """``POST …/items``: the items added, as a list; ``GET …/items``: a page of them."""
    store = state.store.conversations
    if request.method == "POST":
        wire = parse_wire(NewItems, await _body(request, state))
        items = conversation_items(wire.items)
        if await asyncio.to_thread(store.add, conversation_id, owner, items, expires) is None:
            raise _missing(conversation_id)
        return listed_items(items, limit=len(items) or 1, order="asc", after=None)
    query = request.query_params
    limit, order = page_limit(query.get("limit")), page_order(query.get("order"))
    found = await asyncio.to_thread(store.items, conversation_id, owner)
    if found is None:
        raise _missing(conversation_id)
    return listed_items(found, limit=limit, order=order, after=query.get("after"))


async def _item(
    state: AppState, owner: str, conversation_id: str, item_id: str, delete: bool, expires: float
) -> Response:
    """``GET …/items/{item_id}``: the item; ``DELETE``: the conversation, without it."""
    store = state.store.conversations
    if delete:
        found, had = await asyncio.to_thread(store.drop_item, conversation_id, owner, item_id, expires)
        if found is None:
            raise _missing(conversation_id)
        if had:
            return _json(found.as_dict())
    else:
        items = await asyncio.to_thread(store.items, conversation_id, owner)
        if items is None:
            raise _missing(conversation_id)
        for item in items:
            if item.get("id") == item_id:
                return _json(item)
    message = f"Item with id '{item_id}' not found in conversation '{conversation_id}'."
    raise NotFound(message, param="item_id", code="item_not_found")
