"""What the endpoints of things a key owns share (``/v1/files``, ``/v1/batches``): who calls,
a JSON answer, and a page of a list in OpenAI's shape."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from serving.api.state import AppState
from serving.api.stored_responses import owner_of


async def caller(request: Request) -> tuple[AppState, str]:
    """The app's state and whose things the caller reaches (a 401 or 429 as any request's)."""
    state: AppState = request.app.state.turnout
    headers = request.headers
    principal = await state.access.client(headers.get("authorization"), headers.get("api-key"))
    return state, owner_of(principal)


def json_answer(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def page(data: list[dict[str, Any]], has_more: bool) -> Response:
    """A list page: its objects, the first and last ids (cursors for ``after``), more or not."""
    return json_answer(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": has_more,
        }
    )
