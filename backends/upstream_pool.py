"""Keep-alive HTTP/1.1 connections to one upstream, on asyncio and httptools: the gateway→engine hop.

On the request path of the HTTP adapters (``backends/openai_http.py``, ``backends/triton_http.py``):
each variant holds one :class:`UpstreamPool` for its server's origin; :meth:`UpstreamPool.send`
writes one request on an idle pooled connection (or a new one, up to ``limit``) and returns the
:class:`UpstreamResponse` once its status line and headers are in; the body is then read whole
or as it arrives. Responses are parsed by httptools (llhttp, the parser uvicorn uses), so
chunked and content-length bodies are decoded in C.

Why not aiohttp's client: on this path it was a third of the gateway's CPU per request
(``bench/README.md``), for features the hop never uses: cookies, redirects, compression,
proxies, tracing, multipart. This module does only what a gateway's upstream hop needs:
pooled keep-alive, TCP_NODELAY, TLS (``https://``), a connect timeout, a read timeout per wait
for data, a wait for a free connection bounded by the pool timeout, back-pressure on a slow
reader, and one retry of a request whose reused connection the upstream had just closed.

Errors are :class:`UpstreamError` subclasses; the adapters map them to the gateway's typed
errors (503 / 504 / 502).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 256 * 1024  # buffered body bytes before the socket stops being read
# A whole (non-streamed) answer read into memory: a vLLM answer with logprobs runs to megabytes;
# one past this is no answer a gateway should hold.
MAX_BODY_BYTES = 64 * 1024 * 1024
_LOW_WATER = 64 * 1024


class UpstreamError(Exception):
    """The hop failed; the subclass says how."""


class ConnectFailed(UpstreamError):
    """No connection could be opened (refused, unreachable, DNS, TLS handshake)."""


class ConnectTimeout(UpstreamError, TimeoutError):
    """Opening a connection, or waiting for a free one, took longer than allowed."""


class PoolExhausted(ConnectTimeout):
    """Every connection the pool may open was busy for the whole pool timeout (a local limit:
    the upstream itself may be fine)."""


class ReadTimeout(UpstreamError, TimeoutError):
    """No data arrived within the read timeout."""


class Disconnected(UpstreamError):
    """The upstream closed the connection before the answer was whole."""

    def __init__(self, message: str, *, before_answer: bool) -> None:
        super().__init__(message)
        self.before_answer = before_answer


class ProtocolError(UpstreamError):
    """The upstream's bytes are not a valid HTTP/1.1 response."""


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection and the response being read on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.used = False  # has carried a request before: the upstream may have closed it idle
        self.busy = False  # a request is in flight on it
        self.got_bytes = False  # some of the answer arrived: a retry could repeat its effect
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.headers_done = False
        self.complete = False
        self.error: UpstreamError | None = None
        self.body: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self._header_name = ""
        self._waiter: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = loop.create_future()  # done once the socket is shut

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes nobody asked for: this connection's framing can't be trusted
            self.close()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"malformed HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.lost.done():
            self.lost.set_result(None)
        if self.headers_done and not self.complete and self._ends_at_close():
            self.complete = True  # a body without length or chunks ends when the connection does
            self._wake()
        elif not self.complete and self.error is None:
            self.error = Disconnected(
                "the upstream closed the connection" + (f": {exc}" if exc else ""),
                before_answer=not self.got_bytes,
            )
            self._wake()

    def pause_writing(self) -> None:  # requests are small; nothing to hold back
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        if key not in self.headers:  # the first of repeated headers
            self.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:  # an interim answer (100 Continue): the real one follows
            self.headers.clear()
            return
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.headers_done:
            self.complete = True
            self._wake()

    # -- for the pool and the response -----------------------------------------------------

    def _ends_at_close(self) -> bool:
        return "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", ""
        )

    def _fail(self, error: UpstreamError) -> None:
        self.error = error
        self._wake()
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def reset(self) -> None:
        """Ready for the next request on this connection."""
        self.status, self.headers, self.keep_alive = 0, {}, True
        self.headers_done = self.complete = self.busy = self.got_bytes = False
        self.error = None
        self.body.clear()
        self.buffered = 0
        self.used = True

    async def wait(self, timeout: float) -> None:
        """Until the parser reports progress (or the connection fails), at most ``timeout`` s."""
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        """The body bytes buffered so far (reading resumes once little is left)."""
        data = self.body.popleft() if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.error is None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(ReadTimeout("no data from the upstream within the read timeout"))


class UpstreamResponse:
    """One answer: ``status`` and ``headers`` (lower-case names) are in; the body follows.

    Call :meth:`release` when done (``finally``): a whole answer puts its connection back in
    the pool; one abandoned half-read closes it."""

    __slots__ = ("_conn", "_pool", "_read_timeout", "headers", "status")

    def __init__(self, conn: _Connection, pool: UpstreamPool, read_timeout: float) -> None:
        self._conn: _Connection | None = conn
        self._pool = pool
        self._read_timeout = read_timeout
        self.status = conn.status
        self.headers = conn.headers

    async def read(self) -> bytes:
        """The whole body, taken as it arrives: past the buffer's high-water mark the socket is
        paused until the buffer is taken, so waiting for the end alone would never see it."""
        conn = self._live()
        parts: list[bytes] = []
        size = 0
        while True:
            if conn.body:
                parts.append(conn.take())
                size += len(parts[-1])
                if size > MAX_BODY_BYTES:
                    conn.close()
                    raise ProtocolError(f"the upstream's answer is larger than {MAX_BODY_BYTES} bytes")
            if conn.complete:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            if conn.error is not None:
                raise conn.error
            await conn.wait(self._read_timeout)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (chunk boundaries are the network's, not the upstream's)."""
        conn = self._live()
        while True:
            if conn.body:
                yield conn.take()
            elif conn.complete:
                return
            elif conn.error is not None:
                raise conn.error
            else:
                await conn.wait(self._read_timeout)

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.give_back(conn)

    def _live(self) -> _Connection:
        if self._conn is None:
            raise RuntimeError("the response was released")
        return self._conn


class UpstreamPool:
    """Pooled keep-alive connections to one origin (``scheme://host:port`` of ``base_url``)."""

    def __init__(
        self,
        base_url: str,
        *,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        pool_timeout: float,
        headers: dict[str, str] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.path = parts.path.rstrip("/")  # the base path every request path goes under
        self.limit = limit
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.pool_timeout = pool_timeout
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        if parts.port is not None:
            host_header += f":{parts.port}"
        fixed = {"host": host_header, **(headers or {})}
        self._fixed = "".join(f"{name}: {value}\r\n" for name, value in fixed.items()).encode("latin-1")
        # (method, path, from the server's root) → request line + fixed headers
        self._starts: dict[tuple[str, str, bool], bytes] = {}
        self._idle: deque[_Connection] = deque()
        self._open = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._shutting: set[asyncio.Future[None]] = set()  # closed connections whose sockets are not shut yet

    async def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        *,
        from_root: bool = False,
    ) -> UpstreamResponse:
        """Send one request (``path`` under the base URL's path, or the server's root with
        ``from_root``: vLLM's ``/tokenize`` beside its ``/v1``); the response once its head is in.

        A reused connection the upstream closed before answering a byte is retried once on a
        fresh one (the request cannot have been acted on), as urllib3 and aiohttp do."""
        head = self._head(method, path, body, headers, from_root)
        while True:
            conn = self._take_idle() or await self._acquire()
            try:
                return await self._exchange(conn, head, body)
            except Disconnected as exc:
                self.give_back(conn)
                if not (exc.before_answer and conn.used):
                    raise
            except BaseException:
                self.give_back(conn)
                raise

    async def close(self) -> None:
        """Close the idle connections and return once every socket the pool closed is shut (at
        most 1 s): a caller that then blocks, or stops the upstream, leaves no connection open
        to it (a ``tritonserver`` waits its whole exit timeout for an open one). A connection
        still carrying an answer closes when that answer is released."""
        self._closed = True
        while self._idle:
            self._close(self._idle.pop())
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectFailed("the pool is closed"))
        if self._shutting:
            await asyncio.wait(set(self._shutting), timeout=1.0)

    def give_back(self, conn: _Connection) -> None:
        """A connection done with: idle again when its answer was whole, else closed."""
        if conn.reusable() and not self._closed:
            conn.reset()
            self._idle.append(conn)
        else:
            self._close(conn)
            self._open -= 1
        self._wake_one()

    def _close(self, conn: _Connection) -> None:
        """Close ``conn``; its socket shuts on a later turn of the loop, which :meth:`close` awaits."""
        conn.close()
        if not conn.lost.done():
            self._shutting.add(conn.lost)
            conn.lost.add_done_callback(self._shutting.discard)

    def _wake_one(self) -> None:
        """A connection or a slot is free: the longest waiter may take it."""
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    # -- internals --------------------------------------------------------------------------

    def _head(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None, from_root: bool
    ) -> bytes:
        start = self._starts.get((method, path, from_root))
        if start is None:  # an adapter sends to a few paths: their request lines are made once
            target = path if from_root else self.path + path
            start = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._fixed
            if len(self._starts) < 64:
                self._starts[(method, path, from_root)] = start
        parts = [start]
        if headers:
            parts += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()]
        if body is not None:
            parts.append(b"content-length: %d\r\n" % len(body))
        parts.append(b"\r\n")
        return b"".join(parts)

    async def _exchange(self, conn: _Connection, head: bytes, body: bytes | None) -> UpstreamResponse:
        assert conn.transport is not None
        conn.busy = True
        conn.transport.write(head + body if body else head)
        while not conn.headers_done:
            if conn.error is not None:
                raise conn.error
            await conn.wait(self.read_timeout)
        return UpstreamResponse(conn, self, self.read_timeout)

    def _take_idle(self) -> _Connection | None:
        """The most recently used idle connection (the least likely to have timed out), if any."""
        while self._idle and not self._closed:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._open -= 1
        return None

    async def _acquire(self) -> _Connection:
        """An idle connection, a new one, or (the pool full) one freed within the pool timeout."""
        if self._closed:
            raise ConnectFailed("the pool is closed")
        conn = self._take_idle()
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.pool_timeout
        while self._open >= self.limit:
            waiter = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken as the deadline passed: hand the free slot on
                raise PoolExhausted(
                    f"all {self.limit} connections busy for {self.pool_timeout:g} s"
                ) from None
            finally:
                if not waiter.done():
                    waiter.cancel()
            if self._idle:
                return await self._acquire()
        self._open += 1
        try:
            return await self._connect(loop)
        except BaseException:
            self._open -= 1
            self._wake_one()  # the slot it held is free again
            raise

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except TimeoutError:
            raise ConnectTimeout(
                f"could not connect to {self.host}:{self.port} within {self.connect_timeout:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        return conn
