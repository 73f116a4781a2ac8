"""What a stored Responses API answer keeps, and what a follow-up reads back from it (pure).

Where it sits: ``serving.api.stored_responses`` stores an answer (``store`` not false) with the
items this module makes, and a request naming it as ``previous_response_id`` reads them back.
As OpenAI's API does, a follow-up's context is the earlier response's context (every input item
of the chain, and each answer's output items), then its own input: its ``instructions`` are
not carried over. Items are the Responses API's own (``message``, ``function_call``,
``function_call_output``, ``reasoning``); ``serving.responses_input`` turns them into chat
messages, leaving reasoning out, as for any replayed answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serving.errors import ClientError


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored answer: the response object as it was returned, the input items of its own
    request (with ids, for ``GET …/input_items``), and the context a follow-up continues."""

    response_id: str
    owner: str  # whose key stored it: only that key reads, lists or deletes it
    created_at: float
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    context: list[dict[str, Any]]


def input_items(given: str | list[Any], rid: str) -> list[dict[str, Any]]:
    """The request's ``input`` as items, each with an id: a string is one user message with one
    ``input_text`` part; a message's string content becomes that part. Items keep their fields."""
    raw: list[Any] = (
        [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else given
    )
    items = []
    for index, item in enumerate(raw):
        found = dict(item) if isinstance(item, dict) else {"type": "message", "content": item}
        kind = found.setdefault("type", "message")
        if kind == "message" and isinstance(found.get("content"), str):
            part = "output_text" if found.get("role") == "assistant" else "input_text"
            found["content"] = [{"type": part, "text": found["content"]}]
        found.setdefault("id", f"{_PREFIX.get(kind, 'item')}_{rid}_{index}")
        items.append(found)
    return items


_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def stored(
    owner: str,
    at: float,
    response: dict[str, Any],
    items: list[dict[str, Any]],
    earlier: list[dict[str, Any]],
) -> StoredResponse:
    """The record of a finished ``response``: its context is what it read (``earlier``: the
    previous response's whole context, or its conversation's items; then its input) and what it
    answered (its output items)."""
    context = [*earlier, *items, *response.get("output", [])]
    return StoredResponse(str(response["id"]), owner, at, response, items, context)


def listed_items(items: list[dict[str, Any]], *, limit: int, order: str, after: str | None) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: a page of the items (``order`` asc or desc, the
    default desc; ``after`` an item id), as OpenAI's list object."""
    ordered = items if order == "asc" else list(reversed(items))
    if after is not None:
        ids = [item.get("id") for item in ordered]
        ordered = ordered[ids.index(after) + 1 :] if after in ids else []
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > len(page),
    }


def page_limit(given: str | None) -> int:
    """A list's ``limit`` query parameter: 1 to 100, the default 20."""
    try:
        limit = int(given if given is not None else "20")
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise ClientError("limit: must be a whole number from 1 to 100", param="limit")
    return limit


def page_order(given: str | None) -> str:
    """A list's ``order`` query parameter: asc or desc, the default desc."""
    order = given or "desc"
    if order not in ("asc", "desc"):
        raise ClientError("order: must be asc or desc", param="order")
    return order
