"""``POST /v1/embeddings``: the client's edge for embeddings.

Reads the body as the generation endpoints do (``serving.api.openai_routes``: size limit, JSON,
the wire model of ``serving.embeddings_protocol``), takes the route's variant under the same
keys, limits, splits, retries and fallbacks (``serving.gateway.Gateway.embed``), and writes
OpenAI's list of embeddings, as numbers or base64. A plain ASGI app, like the generation
endpoints, so that ``serving.app`` serves it ahead of the middleware stack.
"""

from __future__ import annotations

import logging

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serving.api.errors import error_response
from serving.api.openai_routes import (
    WATCH_UPSTREAM_AFTER_S,
    JSONAnswer,
    choose,
    header_map,
    read_body,
    refused,
    request_id,
    unless_disconnected,
)
from serving.api.state import AppState
from serving.api.wire_errors import parse_wire
from serving.embeddings_protocol import EmbeddingsRequest, embeddings_body
from serving.errors import InternalError, TurnoutError
from serving.routing.routed import Routed

log = logging.getLogger("turnout")
ENDPOINT = "embeddings"  # the metrics' endpoint label


async def _serve(scope: Scope, receive: Receive) -> Response | JSONAnswer:
    state: AppState = scope["app"].turnout  # serving.app.GatewayApp
    headers_in = header_map(scope)
    rid = request_id(headers_in.get("x-request-id"))
    headers = {"x-request-id": rid}
    routed: Routed | None = None
    try:
        principal = await state.access.client(headers_in.get("authorization"), headers_in.get("api-key"))
        body = await read_body(receive, headers_in, state.max_body_bytes)
        wire = parse_wire(EmbeddingsRequest, body)
        request = wire.to_embed_request(rid)
        routed = choose(state, principal, headers_in, wire.model, wire.user)
        headers["x-turnout-route-version"] = str(routed.route.version)
        backend = state.gateway.backends[routed.decision.primary]
        watch_after = 0.0 if backend.info.cancel_on_disconnect else WATCH_UPSTREAM_AFTER_S
        result = await unless_disconnected(receive, state.gateway.embed(routed, request), watch_after)
        headers["x-turnout-variant"] = routed.served_by
        if principal.tpm is not None:
            state.access.charge(principal, result.prompt_tokens)
        return JSONAnswer(embeddings_body(wire.model, result, wire.encoding_format), headers)
    except TurnoutError as exc:
        return refused(state, exc, routed, headers, ENDPOINT)
    except Exception:  # served ahead of FastAPI's error middleware, so render the 500 here
        log.exception("request %s failed", rid)
        return error_response(InternalError("internal error"), headers)


async def embeddings(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app of ``/v1/embeddings``; every error is rendered here, in the OpenAI shape."""
    response = await _serve(scope, receive)
    await response(scope, receive, send)
