"""The HTTP/1.1 protocol `turnout serve` runs: uvicorn's httptools one, with bounds on each connection.

First on the request path, before any ASGI code. uvicorn bounds none of these (h11 and nginx
do), so one client could pin memory or a connection for as long as it liked:

- **Head size** (``max_head_bytes``): httptools accumulates a header line in memory for as
  long as it keeps coming (a 50 MB line was taken whole; h11 stops at 16 KB, nginx at 4 x 8 KB).
  The reads that arrive while a request's head is incomplete are counted and, past the bound,
  the answer is ``431`` in the OpenAI error shape and the connection closes; a head that
  arrived whole (in one read, or its last) is measured once parsed, request line and headers,
  and refused alike before any ASGI code sees it.
- **Head time** (``head_timeout_s``, nginx's ``client_header_timeout``): from the connection
  (or a request's first byte) to the end of its headers; a partial head gets ``408``, a
  connection that sent nothing is closed.
- **Body idle time** (``body_timeout_s``, nginx's ``client_body_timeout``): the longest wait
  between two reads of a request's body; past it the answer is ``408`` and the connection
  closes, which the application sees as the client leaving (a 499). A slow but steady upload
  is never cut.
- **Send stall** (``send_stall_timeout_s``): a client that stops reading a response fills the
  socket and the transport's buffer; once writing has been paused that long the connection is
  dropped, which cancels the request (and its upstream request) as a hang-up does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from serving.errors import ClientError


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds, from ``server:`` in the gateway config (``serving.config.ServerSettings``)."""

    max_head_bytes: int
    head_timeout_s: float
    body_timeout_s: float
    send_stall_timeout_s: float


class RefusalCounter(Protocol):
    """Where refusals are counted (``serving.metrics.GatewayMetrics``)."""

    def count_connection_refusal(self, reason: str) -> None: ...


def early_response(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole answer, head and OpenAI error body, written before any ASGI cycle exists."""
    body = orjson.dumps(ClientError(message, code=code).body())
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, reason.encode("ascii"), len(body))
    )
    return head + body


def head_too_large_response(limit: int) -> bytes:
    return early_response(
        431,
        "Request Header Fields Too Large",
        f"the request line and headers exceed {limit} bytes",
        "request_header_fields_too_large",
    )


def head_timeout_response(seconds: float) -> bytes:
    message = f"the request's headers did not arrive within {seconds:g} s"
    return early_response(408, "Request Timeout", message, "request_timeout")


def body_timeout_response(seconds: float) -> bytes:
    message = f"the request's body stopped arriving for {seconds:g} s"
    return early_response(408, "Request Timeout", message, "request_timeout")


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of :class:`ConnectionLimits` (set by
    :func:`guarded_protocol`). Each refusal is logged at debug level (at warning, a client
    could make the log grow as fast as it opens connections) and counted in ``refusals``
    (the gateway's ``turnout_connection_refusals_total{reason}``)."""

    limits: ClassVar[ConnectionLimits]
    refusals: ClassVar[RefusalCounter | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle = True  # between requests: the next byte begins a request line
        self._in_head = False
        self._messages = 0
        self._head_bytes = 0
        self._head_refused = False  # parsed whole, over the bound: its body and end are ignored
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None

    # ---- connection ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._stall_timer = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.limits.send_stall_timeout_s, self._send_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    # ---- parser callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        # A keep-alive timer armed for the request before (answered before its body ended) must
        # not close this one: uvicorn cancels it only at the start of a read, and this request may
        # have begun in the read that ended that body (a stream was cut at 5 s).
        self._unset_keepalive_if_required()
        super().on_message_begin()
        self._idle, self._in_head = False, True
        self._messages += 1
        self._head_bytes = 0
        self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        # The request line ("METHOD SP url SP HTTP/1.1 CRLF", ~16 bytes besides the url) and
        # each "name: value CRLF" header line.
        size = len(self.url) + 16 + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_head_bytes:
            self._head_refused = True  # answered by data_received once the parser returns
            return
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timed_out)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._head_refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._head_refused:
            return
        self._idle = True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()
        # Answered before its body had all come (a 413, 404, 405): uvicorn armed the keep-alive
        # timer with the answer and cancelled it at the next read, and nothing armed it again,
        # so the connection stayed open for good (20 such clients held 20 connections).
        answered = self.cycle is not None and self.cycle.response_complete
        unarmed = not self.pipeline and self.timeout_keep_alive_task is None
        if answered and unarmed and not self.transport.is_closing():
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def data_received(self, data: bytes) -> None:
        idle, in_head, messages = self._idle, self._in_head, self._messages
        super().data_received(data)
        if self._head_refused:
            if not self.transport.is_closing():
                self._refuse_head()
            return
        if self._body_timer is not None and not self.transport.is_closing():  # more body came
            self._body_timer.cancel()
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timed_out)
        if not self._in_head or self.transport.is_closing():
            return
        begun = self._messages - messages
        # Count a read only when all of it is head: it began one (from idle) or went on with one.
        if (idle and begun == 1) or (in_head and begun == 0):
            self._head_bytes += len(data)
        if self._head_bytes > self.limits.max_head_bytes:
            self._refuse_head()

    def _refuse_head(self) -> None:
        limit = self.limits.max_head_bytes
        self.logger.debug("Request head over %d bytes: answered 431 and closed.", limit)
        self._refused("head_too_large")
        self.transport.write(head_too_large_response(limit))
        self.transport.close()

    # ---- timers ------------------------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm_head_timer()  # a pipelined head waits while the answer before it is sent
            return
        if self._in_head:
            seconds = self.limits.head_timeout_s
            self.logger.debug("Request head incomplete after %g s: answered 408.", seconds)
            self.transport.write(head_timeout_response(seconds))
            self._refused("head_timeout")
        elif self._messages == 0:  # opened and never sent a byte (not a keep-alive between requests)
            self._refused("silent_connection")
        self.transport.close()

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            seconds = self.limits.body_timeout_s
            self.logger.debug("Request body idle for %g s: answered 408 and closed.", seconds)
            if self.cycle is None or not self.cycle.response_complete:  # an answered one (a 413 for
                self._refused("body_timeout")  # its length) was counted as that: closed, not again
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(body_timeout_response(seconds))
            self.transport.close()

    def _send_stalled(self) -> None:
        self._stall_timer = None
        if not self.transport.is_closing():
            self.logger.debug(
                "Client read nothing for %g s while an answer waited: connection dropped.",
                self.limits.send_stall_timeout_s,
            )
            self._refused("send_stall")
            self.transport.abort()  # close() would wait for a buffer that never drains

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are no HTTP request (bad framing, a bad method or
        Content-Length), in the OpenAI error shape as every other refusal here, not plain text."""
        self._refused("malformed_request")
        message = f"{msg.rstrip('.')}: the bytes sent are not a well-formed HTTP/1.1 request"
        self.transport.write(early_response(400, "Bad Request", message, "invalid_http_request"))
        self.transport.close()

    def _refused(self, reason: str) -> None:
        if self.refusals is not None:
            self.refusals.count_connection_refusal(reason)


def guarded_protocol(
    limits: ConnectionLimits, refusals: RefusalCounter | None = None
) -> type[GuardedProtocol]:
    """The protocol class for uvicorn's ``http=`` with these bounds; ``refusals`` counts each
    connection a bound ends, by reason (``serving.metrics.CONNECTION_REFUSAL_REASONS``)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits, "refusals": refusals})
