"""``POST /v1/responses/input_tokens``: how many tokens a Responses request's prompt is, unrun.

Where it sits: beside ``/v1/responses`` (``serving.api.openai_routes``), which it mirrors up to
the generation: the body is read as a Responses request (``InputTokensRequest``), a
``previous_response_id``'s or ``conversation``'s turns are read from the store
(``serving.api.stored_responses.recall``), the route picks its variant, and that variant's
adapter counts the prompt as the engine would read it (``backends.base.TokenCounter``: the
embedded engine's tokenizer and chat template, vLLM's ``/tokenize``). Nothing is generated, so
nothing is charged to the key's limits or counted in the route's metrics; a variant that cannot
count (Triton) is a 400 saying so. OpenAI's answer shape: ``{"object": "response.input_tokens",
"input_tokens": N}``.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from backends.base import token_counter
from serving.api.openai_routes import choose, read_body, request_id
from serving.api.state import AppState
from serving.api.stored_responses import recall
from serving.api.wire_errors import parse_wire
from serving.errors import TurnoutError
from serving.responses_protocol import InputTokensRequest, in_responses_terms


async def count_input_tokens(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    headers = dict(request.headers)
    principal = await state.access.client(headers.get("authorization"), headers.get("api-key"))
    wire = parse_wire(InputTokensRequest, await read_body(request.receive, headers, state.max_body_bytes))
    wire.check()
    await recall(state, principal, wire)  # the turns it continues, read into it
    [generate] = wire.to_generates(request_id(headers.get("x-request-id")))
    routed = choose(state, principal, headers, wire.model, wire.user)
    variant = routed.decision.primary
    try:
        count = await token_counter(state.gateway.backends[variant], variant).count_tokens(generate)
    except TurnoutError as exc:
        raise in_responses_terms(exc) from None
    body = {"object": "response.input_tokens", "input_tokens": count}
    return Response(orjson.dumps(body), media_type="application/json", headers={"x-turnout-variant": variant})
