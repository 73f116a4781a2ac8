"""The HTTP/1.1 protocol `turnout serve` runs: uvicorn's httptools one, with a bound on the request head.

First on the request path, before any ASGI code: httptools accumulates a header line in memory
for as long as it keeps coming (a 50 MB header line was taken whole), where h11 stops at 16 KB
and nginx at 4 x 8 KB. This subclass counts the bytes that arrive while a request's head (request
line and headers) is still incomplete and, past ``max_head_bytes``, answers ``431 Request Header
Fields Too Large`` in the OpenAI error shape and closes the connection. A head that arrives
whole in one read is not refused (it is already in memory, and no larger than a read); a read
that also ends a pipelined request is left out of the count: the bound is approximate by one
read, which is all a memory bound needs.
"""

from __future__ import annotations

from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_HEAD_BYTES = 65_536


def head_too_large_response(limit: int) -> bytes:
    """The whole 431 answer, head and OpenAI error body (written before any ASGI cycle exists)."""
    body = orjson.dumps(
        {
            "error": {
                "message": f"the request line and headers exceed {limit} bytes",
                "type": "invalid_request_error",
                "param": None,
                "code": "request_header_fields_too_large",
            }
        }
    )
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: %d\r\n"
        b"connection: close\r\n\r\n" % len(body)
    )
    return head + body


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that refuses a request head over ``max_head_bytes``."""

    max_head_bytes = DEFAULT_MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle = True  # between requests: the next byte begins a request line
        self._in_head = False
        self._messages = 0
        self._head_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._idle, self._in_head = False, True
        self._messages += 1
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._idle = True
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        idle, in_head, messages = self._idle, self._in_head, self._messages
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        begun = self._messages - messages
        # Count a read only when all of it is head: it began one (from idle) or went on with one.
        # A read that also ended an earlier request (pipelining) is left out: the bound is one read.
        if (idle and begun == 1) or (in_head and begun == 0):
            self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self.logger.warning("Request head over %d bytes: answered 431 and closed.", self.max_head_bytes)
            self.transport.write(head_too_large_response(self.max_head_bytes))
            self.transport.close()


def bounded_head_protocol(max_head_bytes: int) -> type[BoundedHeadProtocol]:
    """The protocol class for uvicorn's ``http=`` with this bound."""
    return type("BoundedHeadProtocol", (BoundedHeadProtocol,), {"max_head_bytes": max_head_bytes})
