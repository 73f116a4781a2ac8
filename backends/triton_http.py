"""Triton's HTTP generate extension: ``/v2/models/{m}/generate`` (JSON) and ``/generate_stream`` (SSE).

The transport under ``backends/triton.py`` for ``protocol: generate``: one pool of keep-alive
connections per variant (``backends/upstream_pool.py``, as ``backends/openai_http.py``), inputs
as a flat JSON object, each response's outputs back as a dict, parsed from the SSE stream as it
arrives. Triton's quirks handled here: an error inside a stream is an SSE ``{"error": …}`` event
(with HTTP 200 once the stream has started), and ``/generate`` on a decoupled model answers 200
with an error body.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any
from urllib.parse import quote

import orjson

from backends.settings import TritonSettings
from backends.triton_tensors import ModelFacts, status_error
from backends.upstream_http import (
    UPSTREAM_HEADERS,
    redirect_error,
    send_upstream,
    transport_error,
    upstream_pool,
)
from backends.upstream_pool import UpstreamError, UpstreamPool, UpstreamResponse
from serving.errors import BackendError, TurnoutError

_TRANSPORT_ERRORS = (UpstreamError, TimeoutError, OSError)


def error_message(body: bytes) -> str:
    """Triton's message from an error body: ``{"error": "…"}``, or the same as an SSE event."""
    text = body.strip()
    if text.startswith(b"data:"):
        text = text[5:].split(b"\n\n", 1)[0].strip()
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace")[:500]
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return text.decode("utf-8", errors="replace")[:500]


class TritonHttp:
    """One Triton server's HTTP endpoint."""

    def __init__(self, name: str, settings: TritonSettings) -> None:
        assert settings.url is not None  # the settings validator makes sure
        self.name = name
        self.settings = settings
        self._pool: UpstreamPool | None = None

    @property
    def started(self) -> bool:
        return self._pool is not None

    async def start(self) -> None:
        if self._pool is not None:
            return
        settings = self.settings
        self._pool = upstream_pool(
            str(settings.url), settings.max_connections, settings.timeouts, UPSTREAM_HEADERS
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _url(self, model: str, suffix: str) -> str:
        """The path of ``model``'s ``suffix`` endpoint, under the server URL's own path."""
        return _model_path(model, suffix)

    async def _send(self, method: str, path: str, body: bytes | None = None) -> UpstreamResponse:
        return await send_upstream(self.name, self._pool, method, path, body)

    async def _failure(self, resp: UpstreamResponse) -> TurnoutError:
        redirect = redirect_error(self.name, resp)
        if redirect is not None:
            return redirect
        try:
            body = await resp.read()
        except _TRANSPORT_ERRORS:
            body = b""
        return status_error(self.name, resp.status, error_message(body))

    async def model_config(self, model: str) -> dict[str, Any]:
        resp = await self._send("GET", self._url(model, "/config"))
        try:
            if resp.status >= 300:
                raise await self._failure(resp)
            config = orjson.loads(await resp.read())
        except _TRANSPORT_ERRORS as exc:
            raise transport_error(self.name, exc) from exc
        except orjson.JSONDecodeError as exc:
            raise BackendError(f"Triton variant {self.name}: model config is not JSON") from exc
        finally:
            resp.release()
        if not isinstance(config, dict):
            raise BackendError(f"Triton variant {self.name}: model config is not an object")
        return config

    async def infer(self, facts: ModelFacts, inputs: dict[str, Any], request_id: str) -> dict[str, Any]:
        """One request, one response: ``/generate``."""
        resp = await self._send("POST", self._url(facts.name, "/generate"), _body(facts, inputs, request_id))
        try:
            if resp.status >= 300:
                raise await self._failure(resp)
            data = orjson.loads(await resp.read())
        except _TRANSPORT_ERRORS as exc:
            raise transport_error(self.name, exc) from exc
        except orjson.JSONDecodeError as exc:
            raise BackendError(f"Triton variant {self.name} sent a malformed answer") from exc
        finally:
            resp.release()
        if not isinstance(data, dict):
            raise BackendError(f"Triton variant {self.name} sent a malformed answer")
        if "error" in data:  # 200 with an error body: Triton's way on a decoupled model
            raise BackendError(f"Triton variant {self.name} failed: {data['error']}")
        return data

    async def stream(
        self, facts: ModelFacts, inputs: dict[str, Any], request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Every response of a decoupled model, as it arrives: ``/generate_stream``."""
        body = _body(facts, inputs, request_id)
        resp = await self._send("POST", self._url(facts.name, "/generate_stream"), body)
        try:
            if resp.status >= 300:
                raise await self._failure(resp)
            async for event in _sse_events(resp.iter_chunks()):
                try:
                    data = orjson.loads(event)
                except orjson.JSONDecodeError as exc:
                    raise BackendError(f"Triton variant {self.name} sent a malformed event") from exc
                if not isinstance(data, dict):
                    raise BackendError(f"Triton variant {self.name} sent a malformed event")
                if "error" in data:  # the stream had started (HTTP 200): a failure mid-answer
                    raise BackendError(f"Triton variant {self.name} failed mid-stream: {data['error']}")
                yield data
        except _TRANSPORT_ERRORS as exc:
            raise transport_error(self.name, exc) from exc
        finally:
            resp.release()


@functools.lru_cache(maxsize=64)
def _model_path(model: str, suffix: str) -> str:
    """``/v2/models/{model}{suffix}``, the name percent-quoted: made once per model and endpoint."""
    return "/v2/models/" + quote(model, safe="") + suffix


async def _sse_events(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE byte stream, one per event."""
    buf = b""
    async for raw in body:
        buf = (buf + raw).replace(b"\r\n", b"\n")
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            event, buf = buf[:end], buf[end + 2 :]
            lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if lines:
                yield b"\n".join(lines)
    if buf.strip().startswith(b"data:"):  # a last event without its blank line
        yield buf.strip()[5:].lstrip(b" ")


def _body(facts: ModelFacts, inputs: dict[str, Any], request_id: str) -> bytes:
    """A generate request: the inputs, and the gateway's request id as Triton's own (its log's
    ``[request id: …]``, as gRPC sends it; the generate extension reads ``id``), unless the model
    has an input of that name, which Triton would also read it as."""
    if not request_id or "id" in facts.inputs:
        return orjson.dumps(inputs)
    return orjson.dumps({"id": request_id, **inputs})
