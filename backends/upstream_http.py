"""What the HTTP adapters share on the way to an upstream: its pool, its headers, and the typed
error for each way an answer can fail.

Used by ``backends/openai_http.py`` (any OpenAI-compatible server) and ``backends/triton_http.py``
(Triton's generate extension), on the request path between ``serving.gateway`` and the engine:
:func:`upstream_pool` makes a variant's pooled keep-alive connections
(``backends/upstream_pool.py``), :func:`send_upstream` sends one request on them;
:func:`status_error` maps a non-2xx answer (4xx kept, but 429 an overload and 401/403/404/405 a
502 naming the variant's setting to check; 503/504 kept, other 5xx a 502), :func:`redirect_error`
a 3xx, and :func:`transport_error` a connection or parse failure (unreachable 503, timeout 504,
full pool 429, else 502).
"""

from __future__ import annotations

import orjson

from backends.settings import TimeoutSettings
from backends.upstream_pool import (
    ConnectFailed,
    ConnectTimeout,
    PoolExhausted,
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
)
from serving.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    ClientError,
    Overloaded,
    TurnoutError,
    UpstreamRefused,
)


class UpstreamClientError(ClientError):
    """The upstream refused the request (4xx): its status and OpenAI error fields, as given."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code, headers=headers)
        self.status = status
        if error_type:
            self.error_type = error_type


def error_fields(body: bytes) -> tuple[str | None, str | None, str | None, str | None]:
    """(message, type, param, code) from an OpenAI error body (or vLLM's flat one)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None, None
    if not isinstance(data, dict):
        return None, None, None, None
    err = data.get("error", data)
    if not isinstance(err, dict):
        return (err if isinstance(err, str) else None), None, None, None
    message, etype, param, code = (err.get(k) for k in ("message", "type", "param", "code"))
    if message is None and "detail" in data:  # FastAPI's own 4xx body (a 422 lists what failed)
        message = str(data["detail"])[:500]
    return (
        message if isinstance(message, str) else None,
        etype if isinstance(etype, str) else None,
        param if isinstance(param, str) else None,
        str(code) if code is not None else None,
    )


class UpstreamOverloaded(Overloaded):
    """The upstream answered 429: it (or its provider's limit) is saturated, not the request wrong.

    An :class:`Overloaded`, so the gateway tries the route's fallbacks and leaves the breaker
    as it was (LiteLLM falls back on a provider's 429 alike); if every attempt fails, the client
    gets the 429 with the upstream's ``Retry-After``, as given."""

    default_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, code: str | None, retry_after: str | None) -> None:
        # The upstream's Retry-After as given (seconds or an HTTP date), else 1 s as every other
        # 429 of the gateway; not Overloaded.__init__, which takes seconds only.
        TurnoutError.__init__(self, message, code=code, headers={"retry-after": retry_after or "1"})


# Upstream 4xx that are the gateway's doing, and the variant setting each points to.
_VARIANT_MISCONFIGURED = {401: "api_key", 403: "api_key", 404: "model, base_url and task", 405: "base_url"}


def status_error(name: str, status: int, body: bytes, retry_after: str | None) -> TurnoutError:
    """Map a non-2xx upstream answer to the typed error the gateway renders.

    4xx keep their status and fields (the request is at fault) except 429, an overload, and
    those that say the gateway's own settings for the variant are wrong (its ``api_key``,
    ``model`` or ``base_url``, or the call does not suit that upstream): an
    :class:`UpstreamRefused` 502 naming the upstream, so the client is not told that a model
    ``GET /v1/models`` lists does not exist, or that its own key failed; the route's fallbacks
    are tried, and the variant's breaker is left as it was. 503 and 504 stay 503 and 504 (as
    Triton's are mapped), any other 5xx is a 502. ``Retry-After`` travels with the 429 and the
    503."""
    message, etype, param, code = error_fields(body)
    headers = {"retry-after": retry_after} if retry_after is not None else None
    if status == 429:
        return UpstreamOverloaded(
            message or f"upstream {name} answered 429", code=code, retry_after=retry_after
        )
    if status in _VARIANT_MISCONFIGURED:
        hint = _VARIANT_MISCONFIGURED[status]
        return UpstreamRefused(
            f"upstream {name} answered {status}: {message or hint} (check the variant's {hint})"
        )
    if 400 <= status < 500:
        return UpstreamClientError(
            status,
            message or f"upstream {name} answered {status}",
            error_type=etype,
            param=param,
            code=code,
            headers=headers,
        )
    detail = f": {message}" if message else ""
    if status == 503:
        return BackendUnavailable(f"upstream {name} answered 503{detail}", headers=headers)
    if status == 504:
        return BackendTimeout(f"upstream {name} answered 504{detail}")
    return BackendError(f"upstream {name} answered {status}{detail}")


def redirect_error(name: str, resp: UpstreamResponse) -> TurnoutError | None:
    """A 3xx answer as a 502 naming where it points, or None for any other status.

    Redirects are not followed: a client library would turn the POST into a GET on a 301/302
    and the client would see the new address's 405, with its body dropped."""
    if not 300 <= resp.status < 400:
        return None
    where = resp.headers.get("location") or "nowhere"
    return BackendError(
        f"upstream {name} answered {resp.status} redirecting to {where}; redirects are not "
        "followed: point the variant at the final address"
    )


TRANSPORT_ERRORS = (UpstreamError, TimeoutError, OSError)
# Every request to an upstream (here and Triton's HTTP transport). identity: answers are parsed
# as they arrive and never inflated, so no upstream that compresses when allowed (nginx,
# Triton's /infer) may send gzip or br.
UPSTREAM_HEADERS = {
    "content-type": "application/json",
    "user-agent": "turnout",
    "accept-encoding": "identity",
}


def upstream_pool(
    url: str, max_connections: int, timeouts: TimeoutSettings, headers: dict[str, str]
) -> UpstreamPool:
    """The pool one HTTP variant (here, or Triton's HTTP transport) shares among all its clients:
    no cookie, redirect or proxy state is kept in it."""
    return UpstreamPool(
        url,
        limit=max_connections,
        connect_timeout=timeouts.connect,
        read_timeout=timeouts.read,
        pool_timeout=timeouts.pool,
        headers=headers,
    )


async def send_upstream(
    name: str,
    pool: UpstreamPool | None,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    from_root: bool = False,
) -> UpstreamResponse:
    """One request on variant ``name``'s pool; its answer once the head is in, or a typed error."""
    if pool is None:
        raise BackendUnavailable(f"backend {name} is not started")
    try:
        return await pool.send(method, path, body, headers, from_root=from_root)
    except TRANSPORT_ERRORS as exc:
        raise transport_error(name, exc) from exc


class PoolFull(Overloaded):
    """The variant's own connection limit (``max_connections``) is reached: a 429, as a full
    embedded queue is, so fallbacks are tried and the upstream's breaker is not charged (Envoy
    treats its pool overflow as a local answer, not an upstream failure, alike)."""

    default_code = "upstream_pool_full"


def transport_error(name: str, exc: Exception) -> TurnoutError:
    """Map a connection failure (or a parse failure) to 503 / 504 / 502; a full pool to 429."""
    if isinstance(exc, PoolExhausted):
        return PoolFull(f"variant {name}: {exc} (its max_connections); retry later", retry_after=1.0)
    if isinstance(exc, ConnectTimeout):
        return BackendTimeout(f"upstream {name}: connect timeout: {exc}")
    if isinstance(exc, TimeoutError):
        return BackendTimeout(f"upstream {name}: read timeout")
    if isinstance(exc, ConnectFailed):
        return BackendUnavailable(f"upstream {name} unreachable: {exc}")
    if isinstance(exc, UpstreamError | OSError):
        return BackendError(f"upstream {name} failed: {type(exc).__name__}: {exc}")
    return BackendError(f"upstream {name} sent a malformed answer: {type(exc).__name__}: {exc}")
