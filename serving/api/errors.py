"""Render every error that leaves the gateway in the OpenAI error shape.

Installed on the app by ``serving.app.create_app``; typed :class:`TurnoutError` keep
their status and headers (e.g. ``Retry-After``), framework errors (unknown path,
wrong method) and unexpected exceptions are mapped too, so no client ever sees HTML.
"""

from __future__ import annotations

import logging

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from serving.errors import TurnoutError

log = logging.getLogger("turnout")


_MAX_CLIENT_REQUEST_ID = 128  # characters of a client's x-request-id that are echoed


def client_request_id(sent: str | None) -> str | None:
    """The client's ``x-request-id`` when it is fit to echo in a header and an answer's id
    (printable ASCII, at most 128 characters), else None."""
    if sent and len(sent) <= _MAX_CLIENT_REQUEST_ID and sent.isascii() and sent.isprintable():
        return sent
    return None


def error_response(exc: TurnoutError, headers: dict[str, str]) -> Response:
    """The OpenAI error body; ``headers`` (request id, variant) are sent with the error's own."""
    headers = {**headers, **exc.headers}
    return Response(
        orjson.dumps(exc.body()), status_code=exc.status, headers=headers, media_type="application/json"
    )


def _body(message: str, error_type: str, code: str | None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "param": None, "code": code}})


async def handle_turnout_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TurnoutError)
    rid = client_request_id(request.headers.get("x-request-id"))
    return error_response(exc, {"x-request-id": rid} if rid else {})


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error_type = "invalid_request_error" if exc.status_code < 500 else "internal_error"
    message = str(exc.detail)
    if exc.status_code == 404:
        path = request.url.path
        message = f"Unknown path {path}"
        if path.endswith("/") and _served(request, path.rstrip("/")):
            message += f" (did you mean {path.rstrip('/')}?)"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    return Response(
        _body(message, error_type, None),
        status_code=exc.status_code,
        headers=dict(exc.headers or {}),
        media_type="application/json",
    )


def _served(request: Request, path: str) -> bool:
    """Whether the app has a route for ``path`` (any method)."""
    if not path:
        return False
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] != Match.NONE for route in request.app.router.routes)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return Response(
        _body("internal error", "internal_error", "internal_error"),
        status_code=500,
        media_type="application/json",
    )
