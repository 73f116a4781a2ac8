"""The admin API: read and change routes, roll back, read shadow comparisons and the audit log.

Operators (``turnout routes …``, curl) call these; each handler checks the bearer token's
role (viewer reads, operator writes), validates the spec against this process's variants
(422 with the reason, nothing written), writes through the route store with ``If-Match``
optimistic concurrency (409 on a stale version) and puts the change in force here at once;
other gateway processes pick it up from the store within their poll interval.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from serving.api.openai_routes import read_body
from serving.api.state import AppState
from serving.auth import Role
from serving.errors import ClientError, Unprocessable
from serving.routing.spec import RouteSpec, route_name_problem, write_problems
from serving.routing.spec_errors import field_message
from serving.shadow_merge import LOCAL, shadow_summary
from serving.store import RouteVersion


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type="application/json")


def _state(request: Request, needed: Role) -> AppState:
    state: AppState = request.app.state.turnout
    state.access.admin(request.headers.get("authorization"), needed)
    return state


def _principal(request: Request, state: AppState, needed: Role) -> str:
    return state.access.admin(request.headers.get("authorization"), needed).name


def _version_response(state: AppState, stored: RouteVersion, status: int = 200) -> Response:
    body = stored.as_dict()
    canary = state.canary.last.get(stored.route) if state.canary is not None else None
    if canary is not None and canary["version"] == stored.version:
        body["canary_status"] = canary
    return _json(body, status, {"etag": f'"{stored.version}"'})


def _if_match(request: Request) -> int | None:
    raw = request.headers.get("if-match")
    if raw is None or raw.strip() == "*":
        return None
    value = raw.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise ClientError(f"If-Match must be a route version number, got {raw!r}", param="If-Match")
    return int(value)


async def _body(request: Request, state: AppState) -> dict[str, Any]:
    """The JSON object sent, bounded by ``server.max_body_bytes`` as the OpenAI endpoints' are (a
    reason of megabytes would be stored in every history and audit read)."""
    raw = await read_body(request.receive, dict(request.headers), state.max_body_bytes)
    if not raw:
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ClientError(f"The body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ClientError("The body must be a JSON object")
    return data


def _parse_spec(data: object, state: AppState) -> RouteSpec:
    """Validate a route spec from the body; spec-declared variants may be named by spec name."""
    backends = state.gateway.backends
    known, aliases = frozenset(backends), state.variant_aliases
    try:
        spec = RouteSpec.model_validate(data).renamed(aliases)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in ("spec", *error["loc"]))
        raise Unprocessable(f"{where}: {field_message(error)}", param=where) from None
    found = write_problems(spec, known, {name: backend.info.task for name, backend in backends.items()})
    if found:
        raise Unprocessable("spec." + "; spec.".join(found), param="spec")
    return spec


async def list_routes(request: Request) -> Response:
    state = _state(request, "viewer")
    current = await asyncio.to_thread(state.store.current)
    return _json({"routes": [current[name].as_dict() for name in sorted(current)]})


async def get_route(request: Request) -> Response:
    state = _state(request, "viewer")
    stored = await asyncio.to_thread(state.store.get, request.path_params["name"])
    return _version_response(state, stored)


async def put_route(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    author = _principal(request, state, "operator")
    name = request.path_params["name"]
    problem = route_name_problem(name)
    if problem and name not in state.gateway.routes:  # one stored before the rule keeps its name
        raise Unprocessable(problem, param="name")
    expected = _if_match(request)
    body = await _body(request, state)
    if "spec" not in body:
        raise Unprocessable('The body must be {"spec": {...}, "reason": "..."}', param="spec")
    spec = _parse_spec(body["spec"], state)
    reason = str(body.get("reason") or "")
    stored = await asyncio.to_thread(
        state.store.put, name, spec, expected_version=expected, author=author, reason=reason
    )
    await state.sync.refresh()
    # 201 for the write that made the route, whatever this process had loaded when it came
    # (five writes at once to a new route were five 201s).
    return _version_response(state, stored, 201 if stored.version == 1 else 200)


async def route_history(request: Request) -> Response:
    state = _state(request, "viewer")
    name = request.path_params["name"]
    versions = await asyncio.to_thread(state.store.history, name)
    return _json({"route": name, "versions": [v.as_dict() for v in versions]})


async def rollback_route(request: Request) -> Response:
    state: AppState = request.app.state.turnout
    author = _principal(request, state, "operator")
    name = request.path_params["name"]
    expected = _if_match(request)
    body = await _body(request, state)
    to_version = body.get("to_version")
    # (true is no version; past 2**63 no store can hold one)
    if to_version is not None and (type(to_version) is not int or not 1 <= to_version < 2**63):
        raise ClientError("to_version must be a positive integer", param="to_version")

    def servable(spec: RouteSpec) -> None:  # the version restored, default or named, must serve here
        _parse_spec(spec.model_dump(mode="json"), state)

    reason = body.get("reason")
    stored = await asyncio.to_thread(
        state.store.rollback,
        name,
        to_version=to_version,
        expected_version=expected,
        author=author,
        reason=str(reason) if reason else None,
        check=servable,
    )
    await state.sync.refresh()
    return _version_response(state, stored)


async def route_shadow(request: Request) -> Response:
    state = _state(request, "viewer")
    name = request.path_params["name"]
    stored = await asyncio.to_thread(state.store.get, name)
    tee = state.gateway.shadows
    own = {**state.shadow_recorder.state(), "in_flight": tee.in_flight if tee else 0}
    states = {LOCAL: own} if state.shadow_states is None else await state.shadow_states(own)
    summary = shadow_summary(name, states, state.shadow_recorder.recent_cap)
    summary["configured"] = [s.model_dump(mode="json") for s in stored.spec.shadows]
    return _json(summary)


async def audit(request: Request) -> Response:
    state = _state(request, "viewer")
    raw_limit = request.query_params.get("limit", "100")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 10_000:
        raise ClientError("limit must be an integer from 1 to 10000", param="limit")
    route = request.query_params.get("route") or None
    entries = await asyncio.to_thread(state.store.audit, limit=int(raw_limit), route=route)
    return _json({"entries": [e.as_dict() for e in entries]})


def install(app: Any) -> None:
    """Register the admin endpoints on the FastAPI app.

    Route names may hold "/" (``meta-llama/Llama-3.1-8B-Instruct``), so each takes the rest of
    the path; the sub-resources come first, and no route name ends like one (``route_name_problem``)."""
    app.add_route("/admin/routes", list_routes, methods=["GET"])
    app.add_route("/admin/routes/{name:path}/history", route_history, methods=["GET"])
    app.add_route("/admin/routes/{name:path}/rollback", rollback_route, methods=["POST"])
    app.add_route("/admin/routes/{name:path}/shadow", route_shadow, methods=["GET"])
    app.add_route("/admin/routes/{name:path}", get_route, methods=["GET"])
    app.add_route("/admin/routes/{name:path}", put_route, methods=["PUT"])
    app.add_route("/admin/audit", audit, methods=["GET"])
