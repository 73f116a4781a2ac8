"""The admin API for keys: create, list and revoke API keys and admin tokens over HTTP.

What ``turnout keys`` does on the store, for operators who reach the gateway rather than its
database (a Kubernetes Service, LiteLLM's ``/key/generate`` habit). Admin role only, as
creating a key can create an admin. A new key is in force on this process at once and on the
others sharing the store within their poll interval; it is shown once, in the 201's body.
Every change is in the audit log under the caller's name.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import Response

from deploy.field_errors import plain_reason
from serving.api.admin_routes import _body, _json, _principal
from serving.api.state import AppState
from serving.cli_types import key_name_problem
from serving.errors import ClientError, Unprocessable

_Limit = Annotated[int, Strict(), Field(ge=1, lt=2**31)]


class NewKey(BaseModel):
    """``POST /admin/keys``' body, as ``turnout keys create``'s arguments."""

    model_config = ConfigDict(extra="forbid")
    # LiteLLM's /key/generate body, for callers who bring it (deploy.unknown_keys).
    TERMS_ELSEWHERE: ClassVar[dict[str, str]] = {
        "key_alias": "LiteLLM's key_alias is 'name' here",
        "rpm_limit": "LiteLLM's rpm_limit is 'rpm' here",
        "tpm_limit": "LiteLLM's tpm_limit is 'tpm' here",
        "models": "a key here may call every route (LiteLLM's models list has no equivalent)",
        "max_budget": "keys here have rate limits (rpm, tpm), no budget",
        "duration": "keys here do not expire: revoke one with DELETE /admin/keys/{name}",
    }

    name: str
    role: Literal["client", "viewer", "operator", "admin"] = "client"
    rpm: _Limit | None = None  # requests per minute; none: unlimited
    tpm: _Limit | None = None  # tokens per minute

    @field_validator("name")
    @classmethod
    def _a_key_name(cls, value: str) -> str:
        problem = key_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


def _new_key(data: dict[str, Any]) -> NewKey:
    try:
        return NewKey.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        reason = plain_reason(error, NewKey, mapping="an object", noun="field")
        raise Unprocessable(f"{where}: {reason}", param=where, code="invalid_key_request") from None


def _admin(request: Request) -> tuple[AppState, str]:
    state: AppState = request.app.state.turnout
    return state, _principal(request, state, "admin")


async def list_keys(request: Request) -> Response:
    state, _ = _admin(request)
    flag = request.query_params.get("all", "false").lower()
    if flag not in ("true", "false", "1", "0"):
        raise ClientError("all must be true or false", param="all")
    records = await asyncio.to_thread(state.store.keys, include_revoked=flag in ("true", "1"))
    return _json({"keys": [record.as_dict() for record in records]})


async def create_key(request: Request) -> Response:
    state, actor = _admin(request)
    wanted = _new_key(await _body(request, state))
    key, record = await asyncio.to_thread(
        state.store.issue_key, name=wanted.name, role=wanted.role, rpm=wanted.rpm, tpm=wanted.tpm, actor=actor
    )
    await state.sync.refresh()  # in force here before the answer
    return _json({"key": key, **record.as_dict()}, 201)


async def revoke_key(request: Request) -> Response:
    state, actor = _admin(request)
    record = await asyncio.to_thread(state.store.revoke_key, request.path_params["name"], actor=actor)
    await state.sync.refresh()
    return _json(record.as_dict())


def install(app: Any) -> None:
    """Register the key endpoints on the FastAPI app."""
    app.add_route("/admin/keys", list_keys, methods=["GET"])
    app.add_route("/admin/keys", create_key, methods=["POST"])
    app.add_route("/admin/keys/{name}", revoke_key, methods=["DELETE"])
