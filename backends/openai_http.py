"""Adapter for any OpenAI-compatible upstream: vLLM (CUDA/ROCm/TPU/CPU), trtllm-serve, SGLang.

It sits between ``serving.gateway`` and the engine on the request path: it turns a
:class:`GenerateRequest` into a ``/chat/completions`` or ``/completions`` POST (and an
:class:`EmbedRequest` into an ``/embeddings`` one, ``backends/openai_embeddings.py``) on the
variant's pooled keep-alive connections (``backends/upstream_pool.py``), and the answer back into a
:class:`Completion` or a stream of :class:`Chunk` (parsed from the upstream SSE as it
arrives, never buffered whole). Every failure leaves as a typed ``serving.errors``
error (``backends/upstream_http.py``): upstream 4xx → :class:`UpstreamClientError` (same status
and body) but 429 → an :class:`Overloaded` (fallbacks are tried) and 401/403/404/405 → 502 (the
variant's own configuration is wrong, not the client's request); 503/504 kept, other 5xx or
malformed → 502, unreachable → 503, timeout → 504, in both paths alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import orjson

from backends.base import (
    BackendInfo,
    Chunk,
    Completion,
    Embeddings,
    EmbedRequest,
    GenerateRequest,
    Usage,
    merge_extra,
)
from backends.load_probe import metrics_url
from backends.logprobs import merge_logprobs
from backends.openai_answer import (
    CHOICE_FIELDS,
    RESPONSE_FIELDS,
    STREAM_CHOICE_FIELDS,
    CarriedFields,
    bare,
    event_data,
    message_extra,
    other_fields,
    stop_reason_of,
    text_of,
    usage_of,
)
from backends.openai_embeddings import embeddings_body, read_embeddings
from backends.settings import OpenAIHttpSettings
from backends.upstream_http import (
    TRANSPORT_ERRORS,
    UPSTREAM_HEADERS,
    error_fields,
    redirect_error,
    send_upstream,
    status_error,
    transport_error,
    upstream_pool,
)
from backends.upstream_pool import UpstreamPool, UpstreamResponse
from serving.errors import BackendError, ClientError, TurnoutError

_STREAM_OPTIONS = {"include_usage": True}


# One SSE event's bytes held while waiting for its end: a token's event with 20 top logprobs is
# a few KB; an upstream past this is not streaming SSE (memory would grow with it otherwise).
MAX_SSE_EVENT_BYTES = 4 * 1024 * 1024


class OpenAIHttpBackend:
    """One OpenAI-compatible upstream; one pooled client session per backend."""

    def __init__(self, name: str, settings: OpenAIHttpSettings) -> None:
        self.name = name
        self.settings = settings
        self.info = BackendInfo(
            kind="openai_http",
            engine=settings.engine,
            vendor=settings.vendor,
            accelerator=settings.accelerator,
            task=settings.task,
        )
        self._paths = {"chat": "/chat/completions", "completion": "/completions"}
        # vLLM's /tokenize sits at the server's root, beside /v1 (sent with ``from_root``)
        self._tokenize = metrics_url(urlsplit(str(settings.base_url)).path, "/tokenize")
        self._headers = dict(UPSTREAM_HEADERS)
        if settings.api_key:
            self._headers["authorization"] = f"Bearer {settings.api_key}"
        self._pool: UpstreamPool | None = None

    async def start(self) -> None:
        if self._pool is not None:
            return
        settings = self.settings
        self._pool = upstream_pool(
            str(settings.base_url), settings.max_connections, settings.timeouts, self._headers
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def ready(self) -> bool:
        return self._pool is not None

    async def _post(self, request: GenerateRequest, stream: bool) -> UpstreamResponse:
        body = self._body(request, stream)
        return await self._send(self._paths[request.kind], body, request.request_id)

    async def _send(self, path: str, body: bytes, rid: str, *, from_root: bool = False) -> UpstreamResponse:
        headers = {"x-request-id": rid} if rid and rid.isascii() and rid.isprintable() else None
        return await send_upstream(self.name, self._pool, "POST", path, body, headers, from_root=from_root)

    async def _whole(self, resp: UpstreamResponse) -> bytes:
        """A non-streamed answer's body; a non-2xx or a failure reading it as the typed error."""
        try:
            if resp.status >= 300:
                raise await self._fail(resp)
            return await resp.read()
        except TRANSPORT_ERRORS as exc:
            raise transport_error(self.name, exc) from exc
        finally:
            resp.release()

    async def _fail(self, resp: UpstreamResponse) -> TurnoutError:
        """The typed error for a non-2xx answer (its body read whole)."""
        redirect = redirect_error(self.name, resp)
        if redirect is not None:
            return redirect
        try:
            body = await resp.read()
        except TRANSPORT_ERRORS:
            body = b""
        return status_error(self.name, resp.status, body, resp.headers.get("retry-after"))

    def _body(self, request: GenerateRequest, stream: bool) -> bytes:
        body: dict[str, Any] = dict(request.extra) if request.extra else {}
        body["model"] = self.settings.model
        if request.kind == "chat":
            body["messages"] = request.messages or []
        elif request.prompt_ids is not None:
            body["prompt"] = request.prompt_ids
        else:
            body["prompt"] = request.prompt or ""
        p = request.params
        if p.max_tokens is not None:
            body["max_tokens"] = p.max_tokens
        if p.temperature is not None:
            body["temperature"] = p.temperature
        if p.top_p is not None:
            body["top_p"] = p.top_p
        if p.top_k is not None:
            body["top_k"] = p.top_k
        if p.seed is not None:
            body["seed"] = p.seed
        if p.stop:
            body["stop"] = list(p.stop)
        if p.ignore_eos:  # vLLM's extension; only sent when asked for
            body["ignore_eos"] = True
        body["stream"] = stream
        if stream:
            options = body.get("stream_options")
            body["stream_options"] = (
                {**options, **_STREAM_OPTIONS} if isinstance(options, dict) else _STREAM_OPTIONS
            )
        else:
            body.pop("stream_options", None)
        return orjson.dumps(body)

    async def complete(self, request: GenerateRequest) -> Completion:
        content = await self._whole(await self._post(request, False))
        try:
            data = orjson.loads(content)
            choice = data["choices"][0]
            chat = request.kind == "chat"
            text = text_of(choice["message"].get("content") if chat else choice["text"])
            usage = usage_of(data.get("usage")) or Usage()
            finish = choice.get("finish_reason") or "stop"
            extra = message_extra(choice["message"]) if chat else None
            return Completion(
                text, finish, usage, choice.get("logprobs"), extra, stop_reason_of(choice),
                choice_extra=other_fields(choice, CHOICE_FIELDS),
                response_extra=other_fields(data, RESPONSE_FIELDS),
            )  # fmt: skip
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise transport_error(self.name, exc) from exc

    async def count_tokens(self, request: GenerateRequest) -> int:
        """The prompt's tokens by the upstream's own count: vLLM's ``/tokenize`` (at the server's
        root, beside ``/v1``), with the chat template and the tools a generation would render."""
        body: dict[str, Any] = {"model": self.settings.model}
        if request.kind == "chat":
            body["messages"] = request.messages or []
            body["add_generation_prompt"] = True
            if request.extra and request.extra.get("tools"):
                body["tools"] = request.extra["tools"]
        else:
            body["prompt"] = request.prompt_ids if request.prompt_ids is not None else request.prompt or ""
        resp = await self._send(self._tokenize, orjson.dumps(body), request.request_id, from_root=True)
        if resp.status == 404:
            resp.release()
            raise ClientError(
                f"variant '{self.name}': its upstream has no /tokenize (vLLM has one), so it cannot "
                "count a prompt's tokens without running it",
                param="model",
                code="model_not_supported",
            )
        content = await self._whole(resp)
        try:
            return int(orjson.loads(content)["count"])
        except (ValueError, KeyError, TypeError) as exc:
            raise transport_error(self.name, exc) from exc

    async def embed(self, request: EmbedRequest) -> Embeddings:
        body = embeddings_body(self.settings.model, request)
        content = await self._whole(await self._send("/embeddings", body, request.request_id))
        try:
            return read_embeddings(content, len(request.inputs))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise transport_error(self.name, exc) from exc

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        resp = await self._post(request, True)
        try:
            if resp.status >= 300:
                raise await self._fail(resp)
            async for chunk in self._events(resp.iter_chunks(), request.kind == "chat"):
                yield chunk
        except TRANSPORT_ERRORS as exc:
            raise transport_error(self.name, exc) from exc
        finally:
            resp.release()

    async def _events(self, body: AsyncIterator[bytes], chat: bool) -> AsyncIterator[Chunk]:
        """Parse SSE from the raw byte stream; hold the finish chunk back to fold usage into it."""
        buf = b""
        carried = CarriedFields()
        last: Chunk | None = None  # the chunk that carried finish_reason, not yet yielded
        running: Usage | None = None  # an upstream that reports usage on every chunk: the latest
        async for raw in body:
            buf = buf + raw if buf else raw
            if b"\r" in buf:
                buf = buf.replace(b"\r\n", b"\n")
            while True:
                end = buf.find(b"\n\n")
                if end < 0:
                    break
                event, buf = buf[:end], buf[end + 2 :]
                data = event_data(event)
                if data is None:
                    continue
                if data == b"[DONE]":
                    last = last or carried.onto(Chunk())
                    last.finish_reason = last.finish_reason or "stop"
                    last.usage = last.usage or running
                    yield last
                    return  # releasing the response reuses the connection once the body has ended
                chunk = self._parse_chunk(data, chat)
                if chunk is None:
                    continue
                if last is not None:  # the usage-only chunk (or a late one) after the finish
                    last.text += chunk.text
                    last.usage = chunk.usage or last.usage
                    last.finish_reason = chunk.finish_reason or last.finish_reason
                    last.logprobs = merge_logprobs(last.logprobs, chunk.logprobs)
                    if chunk.extra is not None:
                        last.extra = {**(last.extra or {}), **chunk.extra}
                    last.choice_extra = merge_extra(last.choice_extra, chunk.choice_extra)
                    last.response_extra = merge_extra(last.response_extra, chunk.response_extra)
                    if chunk.stop_reason is not None:
                        last.stop_reason = chunk.stop_reason
                elif chunk.finish_reason is not None:
                    last = carried.onto(chunk)
                    last.usage = last.usage or running
                elif bare(chunk):  # usage alone before the finish (continuous stats): the latest
                    running = chunk.usage or running
                    # Fields alone (a role event's prompt_token_ids, Azure's prompt_filter_results)
                    # go with the next chunk: yielded, they were the stream's first token (its
                    # TTFT, and no fallback once an upstream failed before any text).
                    carried.add(chunk)
                else:
                    carried.onto(chunk)
                    # Text with usage and no finish: vLLM's continuous_usage_stats. Held back as
                    # the finish, it held the whole answer back to the end; it goes on now, and
                    # its usage is the finish's if no later one comes.
                    running, chunk.usage = chunk.usage or running, None
                    yield chunk
            if len(buf) > MAX_SSE_EVENT_BYTES:  # no event boundary in sight: not an SSE stream
                raise BackendError(
                    f"upstream {self.name} sent over {MAX_SSE_EVENT_BYTES} bytes without ending an event"
                )
        if last is not None and last.finish_reason is not None:  # clean end without [DONE]
            last.usage = last.usage or running
            yield last
            return
        raise BackendError(f"upstream {self.name} ended the stream before it finished")

    def _parse_chunk(self, data: bytes, chat: bool) -> Chunk | None:
        try:
            obj = orjson.loads(data)
            if obj.get("error"):
                message, _, _, _ = error_fields(data)
                raise BackendError(f"upstream {self.name} failed mid-stream: {message or 'error event'}")
            usage = usage_of(obj.get("usage"))
            response_extra = other_fields(obj, RESPONSE_FIELDS)
            choices = obj.get("choices")
            if not choices:
                if usage is None and response_extra is None:
                    return None
                return Chunk(usage=usage, response_extra=response_extra)
            choice = choices[0]
            text = text_of(choice["delta"].get("content") if chat else choice.get("text"))
            finish = choice.get("finish_reason")
            logprobs = choice.get("logprobs")  # passed on as the upstream shaped it
            extra = message_extra(choice["delta"]) if chat else None
            choice_extra = other_fields(choice, STREAM_CHOICE_FIELDS)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise transport_error(self.name, exc) from exc
        if (
            not text
            and finish is None
            and usage is None
            and not logprobs
            and extra is None
            and (choice_extra is None and response_extra is None)
        ):
            return None  # role-only or empty delta: nothing to pass on
        logprobs = logprobs if isinstance(logprobs, dict) else None
        return Chunk(
            text, finish, usage, logprobs, extra, stop_reason_of(choice), choice_extra, response_extra
        )
