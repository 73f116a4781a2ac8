"""The fault server's wire side: scripts, and the asyncio.Protocol that answers OpenAI requests.

Used by ``backends/fault.py`` (which starts it and documents the directives); one
``FaultConnection`` per client connection parses with httptools and writes canned OpenAI JSON or
SSE straight to the transport, so the fake upstream costs a few microseconds a request
(embeddings too: a vector per input from a hash of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import time
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

import httptools
import orjson

from backends.fault_script import FaultApp, Script, parse_script, split_reply

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_PHRASES = {status.value: status.phrase.encode() for status in HTTPStatus}
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
_EMBEDDINGS = b"/v1/embeddings"
_ANSWERED = (b"/v1/chat/completions", b"/v1/completions", _EMBEDDINGS)


@dataclass(slots=True)
class _Request:
    method: bytes
    path: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool
    hang_up: bool = False  # close after answering, without saying so (``close``)
    query: bytes = b""

    @property
    def reuse(self) -> bool:
        return self.keep_alive and not self.hang_up

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


def _response(
    status: int, body: bytes, keep_alive: bool, ctype: bytes = b"application/json", extra: bytes = b""
) -> bytes:
    head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s%s\r\n" % (
        status,
        _PHRASES.get(status, b"Error"),
        ctype,
        len(body),
        extra,
        b"" if keep_alive else b"connection: close\r\n",
    )
    return head + body


def _error_body(status: int, message: str) -> bytes:
    etype = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": etype, "param": None, "code": status}})


def _chunk(payload: bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    return b"%x\r\ndata: %s\n\n\r\n" % (len(payload) + 8, payload)


class FaultConnection(asyncio.Protocol):
    """One client connection: parse with httptools, answer requests in order."""

    def __init__(self, app: FaultApp) -> None:
        self.app = app
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.queue: deque[_Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.keep_alive = True

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.app.conns.add(self.transport)
        stats = self.app.stats
        stats.connections += 1
        stats.open_connections += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.app.stats.open_connections -= 1
        if self.transport is not None:
            self.app.conns.discard(self.transport)
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(_response(400, _error_body(400, "malformed HTTP request"), False))

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # not reliable once the body is parsed

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path, _, query = self.url.partition(b"?")
        req = _Request(
            self.parser.get_method(), path, self.headers, b"".join(self.body), self.keep_alive, query=query
        )
        if self.task is not None or self.queue:
            self.queue.append(req)
        else:
            self._handle(req)

    # -- answering
    def _write(self, data: bytes, keep_alive: bool = True) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if not keep_alive:
            transport.close()

    def _handle(self, req: _Request) -> None:
        app = self.app
        paths, name = app.stats.paths, req.path.decode()
        paths[name] = paths.get(name, 0) + 1
        if req.method == b"POST" and req.path in _ANSWERED:
            app.stats.requests += 1
            try:
                payload = orjson.loads(req.body) if req.body else {}
                if not isinstance(payload, dict):
                    raise ValueError("body is not a JSON object")
                raw = req.header(b"x-fault")
                text = raw.decode() if raw is not None else payload.pop("x_fault", None)
                script = parse_script(text) if isinstance(text, str) else app.default
            except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
                self._write(_response(400, _error_body(400, str(exc)), req.keep_alive), req.keep_alive)
                return
            chat, req.hang_up = req.path == b"/v1/chat/completions", script.close
            if script.instant and not payload.get("stream"):
                self._write(self._complete(req, payload, script, chat), req.reuse)
            else:
                self._start(self._answer(req, payload, script, chat))
            return
        status, body = 200, b"{}"
        if req.method == b"GET" and req.path == b"/health":
            body = b'{"status":"ok"}'
        elif req.method == b"GET" and req.path == b"/v1/models":
            body = app.models_body
        elif req.method == b"GET" and req.path == b"/stats":
            body = app.stats.as_json()
        elif req.method == b"POST" and req.path == b"/stats/reset":
            app.stats.reset()
        elif req.method == b"GET" and req.path == b"/metrics":
            ctype = b"text/plain; version=0.0.4; charset=utf-8"
            self._write(_response(200, app.metrics_body(), req.keep_alive, ctype), req.keep_alive)
            return
        elif req.method == b"POST" and req.path == b"/load":
            try:
                body = app.set_load(req.query)
            except ValueError as exc:
                status, body = 400, _error_body(400, str(exc))
        else:
            status, body = 404, _error_body(404, "no such route")
        self._write(_response(status, body, req.keep_alive), req.keep_alive)

    def _start(self, coro: Any) -> None:
        self.task = asyncio.ensure_future(coro)
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.task = None
        while self.queue and self.task is None:
            self._handle(self.queue.popleft())

    def _reply_pieces(self, req: _Request, payload: dict[str, Any], script: Script) -> tuple[list[str], str]:
        pieces = self.app.pieces
        if script.echo:
            headers = {k.decode().lower(): v.decode() for k, v in req.headers}
            echoed = orjson.dumps({"body": payload, "headers": headers}).decode()
            pieces = split_reply(echoed, self.app.chunks)
        limit = payload.get("max_tokens")
        if isinstance(limit, int) and 0 <= limit < len(pieces):
            return pieces[:limit], "length"
        return pieces, "stop"

    def _usage(self, req: _Request, completion_tokens: int) -> dict[str, int]:
        prompt = max(1, len(req.body) // 16)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def _complete(self, req: _Request, payload: dict[str, Any], script: Script, chat: bool) -> bytes:
        if script.error:
            extra = b"retry-after: %d\r\n" % script.retry_after if script.error in (429, 503) else b""
            body = _error_body(script.error, f"fault injected: status {script.error}")
            return _response(script.error, body, req.keep_alive, extra=extra)
        if script.corrupt:
            return _response(200, b'{"id": "cmpl-fault", "choices": [{"index": 0, "mess', req.keep_alive)
        if req.path == _EMBEDDINGS:
            return _response(200, embeddings_answer(payload, self._usage(req, 0)), req.keep_alive)
        pieces, finish = self._reply_pieces(req, payload, script)
        text = "".join(pieces)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        content: Any = 123 if script.bad_content else text
        if chat:
            choice["message"] = {"role": "assistant", "content": content}
        else:
            choice["text"] = content
        body = orjson.dumps(
            {
                "id": "chatcmpl-fault" if chat else "cmpl-fault",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": payload.get("model", self.app.model),
                "choices": [choice],
                "usage": self._usage(req, len(pieces)),
            }
        )
        return _response(200, body, req.keep_alive)

    async def _answer(self, req: _Request, payload: dict[str, Any], script: Script, chat: bool) -> None:
        if script.latency_ms:
            await asyncio.sleep(script.latency_ms / 1000)
        if script.drop:
            if self.transport is not None:
                self.transport.close()
            return
        if script.error or not payload.get("stream"):
            self._write(self._complete(req, payload, script, chat), req.reuse)
            return
        await self._stream(req, payload, script, chat)

    async def _stream(self, req: _Request, payload: dict[str, Any], script: Script, chat: bool) -> None:
        pieces, finish = self._reply_pieces(req, payload, script)
        model = payload.get("model", self.app.model)
        created = int(time.time())
        options = payload.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        base: dict[str, Any] = {
            "id": "chatcmpl-fault" if chat else "cmpl-fault",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }

        def event(piece: str | None, reason: str | None, sent: int = 0) -> bytes:
            content: Any = 123 if script.bad_content and sent == 2 else piece
            if chat:
                delta = {"role": "assistant", "content": ""} if piece is None else {"content": content}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            else:
                choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": reason}
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if script.usage_every:
                chunk["usage"] = self._usage(req, sent)
            return _chunk(orjson.dumps(chunk))

        self._write(_SSE_HEAD + (event(None, None) if chat else b""))
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            if i == script.cut or i == script.error_event or (script.corrupt and i == 1):
                break
            if i == 1 and script.stall_ms:
                await asyncio.sleep(script.stall_ms / 1000)
            elif i and script.slow_chunks_ms:
                await asyncio.sleep(script.slow_chunks_ms / 1000)
            self._write(event(piece, finish if i == last else None, i + 1))
        else:
            tail = (
                _chunk(orjson.dumps({**base, "choices": [], "usage": self._usage(req, len(pieces))}))
                if usage
                else b""
            )
            self._write(tail + _DONE, req.reuse)
            return
        if script.error_event >= 0 and script.cut < 0:
            err = orjson.dumps(
                {
                    "error": {
                        "message": "fault injected: error event",
                        "type": "server_error",
                        "param": None,
                        "code": 500,
                    }
                }
            )
            self._write(_chunk(err) + _DONE, req.reuse)
        elif script.corrupt and script.cut < 0:
            self._write(_chunk(b'{"choices": [{"de') + _DONE, req.reuse)
        elif self.transport is not None:
            self.transport.close()  # cut: no [DONE], no terminating chunk


def embeddings_answer(payload: dict[str, Any], usage: dict[str, int]) -> bytes:
    """An OpenAI embeddings list: per input a vector of 8 floats drawn from a hash of the input,
    normalized, so the same input always gets the same vector."""
    given = payload.get("input")
    inputs = [given] if isinstance(given, str) or (given and isinstance(given[0], int)) else given or []
    data = []
    for index, one in enumerate(inputs):
        digest = hashlib.sha256(orjson.dumps(one)).digest()
        raw = [byte - 127.5 for byte in digest[:8]]
        norm = sum(value * value for value in raw) ** 0.5 or 1.0
        data.append({"object": "embedding", "index": index, "embedding": [value / norm for value in raw]})
    counts = {"prompt_tokens": usage["prompt_tokens"], "total_tokens": usage["prompt_tokens"]}
    return orjson.dumps({"object": "list", "data": data, "model": payload.get("model"), "usage": counts})
