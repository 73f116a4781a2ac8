"""Typed gateway errors, each carrying its HTTP status and OpenAI error type.

Raised anywhere on the request path (wire validation, routing, backend adapters);
one handler in ``serving.api.errors`` renders them as the OpenAI error body
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import math
from typing import Any


class TurnoutError(Exception):
    """Base of every error that reaches a client."""

    status: int = 500
    error_type: str = "internal_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InternalError(TurnoutError):
    """A bug in the gateway; logged with its traceback, rendered as a plain 500."""

    default_code = "internal_error"


class ShuttingDown(TurnoutError):
    """The server stopped this request on its way down (uvicorn's graceful shutdown ran out, or
    the process was told to stop): a 503 the client may retry elsewhere, not uvicorn's plain 500."""

    status = 503
    error_type = "service_unavailable"
    default_code = "shutting_down"

    def __init__(self) -> None:
        super().__init__(
            "the gateway is shutting down and stopped this request; retry it",
            headers={"retry-after": "1", "connection": "close"},
        )


class ClientError(TurnoutError):
    """The request is wrong (400 unless a subclass says otherwise)."""

    status = 400
    error_type = "invalid_request_error"


class NotFound(ClientError):
    status = 404
    default_code = "model_not_found"


class PayloadTooLarge(ClientError):
    status = 413
    default_code = "payload_too_large"


class Unauthorized(ClientError):
    status = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.headers.setdefault("www-authenticate", 'Bearer realm="turnout"')  # a 401 must say how (RFC 9110)


# The message the API layer cancels a request's work with when its client hangs up
# (serving.sse.cancel_on_disconnect). Work cancelled without it was cut by the server going
# down (uvicorn's graceful shutdown, a Ray replica's drain), and its client is told a 503.
CLIENT_LEFT = "the client closed the connection"


def cancelled_status(exc: BaseException) -> int:
    """The status cancelled work is counted with: 499 when its client left, else 503, what its
    client is told when the server cuts it (``ShuttingDown``)."""
    return 499 if getattr(exc, "args", ()) == (CLIENT_LEFT,) else ShuttingDown.status


class ClientClosedRequest(ClientError):
    """The client hung up before the answer was ready (nginx's 499; nobody reads the reply)."""

    status = 499
    default_code = "client_closed_request"


class Overloaded(ClientError):
    """A bounded queue is full: the client should retry after ``retry_after`` seconds."""

    status = 429
    error_type = "rate_limit_error"
    default_code = "queue_full"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        # Up, not to the nearest: a client that waits exactly this long must find room (18.4 s
        # said as 18 came back to another 429).
        seconds = max(1, math.ceil(retry_after))
        super().__init__(message, headers={"retry-after": str(seconds)})


class BackendError(TurnoutError):
    """The backend answered wrongly (malformed body, 5xx)."""

    status = 502
    error_type = "upstream_error"
    default_code = "bad_gateway"
    # Whether it says the backend is unhealthy (counted by its circuit breaker, retried).
    judges_backend = True


class UpstreamRefused(BackendError):
    """The upstream refused the gateway's call as made (401/403/404/405): the variant's key,
    model name or URL is wrong, or the call does not suit that upstream (a chat-only model
    asked for a text completion). Not the client's fault as sent, so a 502 and the route's
    fallbacks; not a sign of ill health either, so no breaker count and no retry: one client's
    calls must not take a variant away from the others."""

    default_code = "upstream_refused"
    judges_backend = False


class BackendUnavailable(BackendError):
    status = 503
    default_code = "backend_unavailable"


class BackendTimeout(BackendError):
    status = 504
    default_code = "backend_timeout"


class ConfigError(Exception):
    """Invalid gateway configuration; raised at start-up, never while serving."""


class Forbidden(ClientError):
    """Authenticated, but the key or token's role may not do this."""

    status = 403
    error_type = "permission_error"
    default_code = "insufficient_role"


class Conflict(ClientError):
    """A write based on a stale version (``If-Match`` no longer matches the current one)."""

    status = 409
    default_code = "version_conflict"


class Unprocessable(ClientError):
    """A well-formed body that describes something invalid (e.g. a route naming an unknown variant)."""

    status = 422
    default_code = "invalid_spec"


class RateLimited(Overloaded):
    """A key spent its requests or tokens per minute."""

    default_code = "rate_limit_exceeded"
