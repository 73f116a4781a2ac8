"""``backends/upstream_pool.py`` against real sockets on 127.0.0.1 that answer scripted bytes.

The adapters' own tests (``test_openai_http_adapter.py``, ``test_upstream_*.py``) cover reuse,
pool exhaustion, read timeouts and upstream errors through the fault server and aiohttp apps;
these pin what only raw bytes can show: how a body is framed (chunked, content-length, until
close), interim answers, back-pressure on a slow reader, what happens to a connection whose
answer was abandoned or whose caller was cancelled, malformed answers, the request line and
headers as sent, and TLS.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from backends.upstream_pool import (
    ConnectFailed,
    Disconnected,
    ProtocolError,
    ReadTimeout,
    UpstreamPool,
)

LIMIT = 10.0
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Upstream:
    """A TCP server on 127.0.0.1 running ``handler`` per connection; counts connections and
    keeps each request head it read."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """One request's head and body (by its content-length)."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await reader.readexactly(length) if length else b""


@asynccontextmanager
async def upstream(
    handler: Callable[[Upstream, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Upstream]:
    up = Upstream(lambda r, w: handler(up, r, w))
    server = await asyncio.start_server(up._serve, "127.0.0.1", 0, ssl=ssl_context)
    up.port = server.sockets[0].getsockname()[1]
    try:
        yield up
    finally:
        server.close()


def pool_for(port: int, scheme: str = "http", path: str = "", **overrides: float) -> UpstreamPool:
    settings = {"connect_timeout": 2.0, "read_timeout": 2.0, "pool_timeout": 2.0, **overrides}
    return UpstreamPool(
        f"{scheme}://127.0.0.1:{port}{path}",
        limit=int(settings.pop("limit", 4)),
        headers={"user-agent": "turnout"},
        **settings,
    )


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def answer_each(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive: answer every request with its own body echoed."""
    while True:
        body = await up.read_request(reader)
        writer.write(ok(b"echo:" + body))
        await writer.drain()


async def test_request_line_headers_and_keep_alive() -> None:
    async with upstream(answer_each) as up:
        pool = pool_for(up.port, path="/v1/")
        try:
            for n in range(3):
                resp = await pool.send("POST", "/completions", b"n%d" % n, {"x-request-id": "abc"})
                assert (resp.status, await resp.read()) == (200, b"echo:n%d" % n)
                assert resp.headers["content-length"] == str(len(b"echo:n0"))
                resp.release()
            resp = await pool.send("GET", "/models")
            assert await resp.read() == b"echo:"
            resp.release()
        finally:
            await pool.close()
    assert up.connections == 1  # one kept-alive connection carried all four
    first = up.heads[0].decode()
    assert first.startswith("POST /v1/completions HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{up.port}\r\n" in first and "user-agent: turnout\r\n" in first
    assert "x-request-id: abc\r\n" in first and "content-length: 2\r\n" in first
    assert up.heads[3].startswith(b"GET /v1/models HTTP/1.1\r\n") and b"content-length" not in up.heads[3]


async def test_a_chunked_body_arrives_piece_by_piece_before_it_ends() -> None:
    go_on = asyncio.Event()

    async def chunked(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        await up.read_request(reader)  # the connection is reused for the next request
        writer.write(ok(b"again"))
        await writer.drain()

    async with upstream(chunked) as up:
        pool = pool_for(up.port)
        try:
            resp = await pool.send("POST", "/s", b"{}")
            pieces = resp.iter_chunks()
            assert await asyncio.wait_for(anext(pieces), LIMIT) == b"first"  # before the rest exists
            go_on.set()
            assert [p async for p in pieces] == [b"second"]
            resp.release()
            again = await pool.send("POST", "/s", b"{}")
            assert await again.read() == b"again"
            again.release()
        finally:
            await pool.close()
    assert up.connections == 1


async def test_a_body_without_length_ends_when_the_connection_closes() -> None:
    async def until_close(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
        await writer.drain()

    async with upstream(until_close) as up:
        pool = pool_for(up.port)
        try:
            for _ in range(2):  # the closed connection is not reused: a fresh one each time
                resp = await pool.send("POST", "/x", b"{}")
                assert await asyncio.wait_for(resp.read(), LIMIT) == b"all of it"
                resp.release()
        finally:
            await pool.close()
    assert up.connections == 2


async def test_an_interim_100_continue_is_skipped() -> None:
    async def interim(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"final", b"x-which: final\r\n"))
        await writer.drain()
        await reader.read()

    async with upstream(interim) as up:
        pool = pool_for(up.port)
        try:
            resp = await pool.send("POST", "/x", b"{}")
            assert (resp.status, resp.headers.get("x-which"), await resp.read()) == (200, "final", b"final")
            resp.release()
        finally:
            await pool.close()


async def test_a_slow_reader_holds_the_upstream_back_and_still_gets_every_byte() -> None:
    size = 8 * 1024 * 1024
    sent = asyncio.Event()

    async def big(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        block = bytes(range(256)) * 256  # 64 KiB
        for _ in range(size // len(block)):
            writer.write(block)
            await writer.drain()  # blocks once the reader's socket buffers are full
        sent.set()

    async with upstream(big) as up:
        pool = pool_for(up.port)
        try:
            resp = await pool.send("POST", "/big", b"{}")
            pieces = resp.iter_chunks()
            first = await anext(pieces)
            await asyncio.sleep(0.5)  # a reader that stalls: the sender must be held back
            assert not sent.is_set()
            conn = resp._conn
            assert conn is not None and conn.paused and conn.buffered < 2 * 1024 * 1024
            rest = b"".join([p async for p in pieces])
            resp.release()
        finally:
            await pool.close()
    body = first + rest
    assert len(body) == size and body[:512] == bytes(range(256)) * 2


async def test_a_whole_answer_larger_than_the_read_buffer_is_read_to_its_end() -> None:
    """Past 256 KiB buffered the socket pauses until the buffer is taken; read() used to only
    wait for the end, so any non-streamed answer over that (a vLLM one with logprobs) hung to the
    read timeout. Both framings, each answered twice on one connection."""
    big = bytes(range(256)) * 12_000  # ~3 MB

    async def framed(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = await up.read_request(reader)
            if body == b"chunked":
                pieces = [big[i : i + 100_000] for i in range(0, len(big), 100_000)]
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                writer.write(b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")
            else:
                writer.write(ok(big))
            await writer.drain()

    async with upstream(framed) as up:
        pool = pool_for(up.port, read_timeout=2.0)
        try:
            for framing in (b"length", b"chunked", b"length"):
                resp = await pool.send("POST", "/", framing)
                assert await asyncio.wait_for(resp.read(), LIMIT) == big
                resp.release()
            assert up.connections == 1  # read to its end, each connection went back to the pool
        finally:
            await pool.close()


async def test_an_abandoned_answer_closes_its_connection() -> None:
    async def endless(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"4\r\ntick\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async with upstream(endless) as up:
        pool = pool_for(up.port)
        try:
            resp = await pool.send("POST", "/s", b"{}")
            assert await anext(resp.iter_chunks())
            resp.release()  # half-read: the rest of it must not be read as the next answer
            resp = await pool.send("POST", "/s", b"{}")
            assert await anext(resp.iter_chunks())
            resp.release()
            await pool.close()
            assert _established_to(up.port) == 0  # closed on release, and shut when close() returns
        finally:
            await pool.close()
    assert up.connections == 2


def _established_to(port: int) -> int:
    """Sockets of this machine in ESTABLISHED whose far end is 127.0.0.1:``port`` (/proc/net/tcp)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2] == f"0100007F:{port:04X}" and row.split()[3] == "01")


async def test_close_returns_once_its_sockets_are_shut() -> None:
    """Checked before the loop runs again: a caller that blocks next (stopping a tritonserver,
    which then waited its exit timeout for the open connection) must find none."""
    async with upstream(answer_each) as up:
        pool = pool_for(up.port)
        answers = [await pool.send("POST", "/x", b"{}") for _ in range(2)]  # two connections
        for resp in answers:
            assert await resp.read() == b"echo:{}"
            resp.release()
        assert _established_to(up.port) == 2
        await pool.close()
        assert _established_to(up.port) == 0


async def test_a_cancelled_caller_frees_its_slot() -> None:
    async def silent_then_ok(
        up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await up.read_request(reader)
        if up.connections == 1:
            await asyncio.sleep(30)  # never answers the first request
        writer.write(ok(b"late"))
        await writer.drain()

    async with upstream(silent_then_ok) as up:
        pool = pool_for(up.port, limit=1, read_timeout=30.0)
        try:
            waiting = asyncio.ensure_future(pool.send("POST", "/x", b"{}"))
            await asyncio.sleep(0.2)
            waiting.cancel()  # the client hung up
            with pytest.raises(asyncio.CancelledError):
                await waiting
            resp = await asyncio.wait_for(pool.send("POST", "/x", b"{}"), LIMIT)  # the one slot is free
            assert await resp.read() == b"late"
            resp.release()
        finally:
            await pool.close()


async def test_failures_are_typed() -> None:
    async def garbage(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"SPDY/9 banana\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def hang_up(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)

    async def stall(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        await asyncio.sleep(30)

    async def cut(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly some")
        await writer.drain()

    cases: list[tuple[Callable[..., Awaitable[None]], type[Exception]]] = [
        (garbage, ProtocolError),
        (hang_up, Disconnected),  # a fresh connection: not retried
        (stall, ReadTimeout),
        (cut, Disconnected),
    ]
    for handler, error in cases:
        async with upstream(handler) as up:
            pool = pool_for(up.port, read_timeout=0.5)
            try:
                with pytest.raises(error):
                    resp = await asyncio.wait_for(pool.send("POST", "/x", b"{}"), LIMIT)
                    await asyncio.wait_for(resp.read(), LIMIT)
            finally:
                await pool.close()
            assert up.connections == 1, handler.__name__

    async with upstream(answer_each) as up:
        port = up.port
    pool = pool_for(port)  # nothing listens there any more
    with pytest.raises(ConnectFailed):
        await pool.send("POST", "/x", b"{}")


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


async def test_https_verifies_the_upstream_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cryptography", reason="makes the test certificate: pip install cryptography")
    cert, key = _self_signed(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    async with upstream(answer_each, server_side) as up:
        untrusting = pool_for(up.port, scheme="https")
        try:
            with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.send("POST", "/x", b"{}")
        finally:
            await untrusting.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the system's trust store, as an operator sets it
        trusting = pool_for(up.port, scheme="https")
        try:
            resp = await trusting.send("POST", "/x", b"tls")
            assert (resp.status, await resp.read()) == (200, b"echo:tls")
            resp.release()
        finally:
            await trusting.close()


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    async def chatty(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await up.read_request(reader)
        writer.write(ok(b"mine"))
        await asyncio.sleep(0.1)
        writer.write(ok(b"nobody asked"))  # after the answer, unasked: the framing is off
        await writer.drain()
        await reader.read()

    async with upstream(chatty) as up:
        pool = pool_for(up.port)
        try:
            for _ in range(2):
                resp = await pool.send("POST", "/x", b"{}")
                assert await resp.read() == b"mine"
                resp.release()
                await asyncio.sleep(0.3)
        finally:
            await pool.close()
    assert up.connections == 2  # the second request went on a fresh connection


async def test_a_failed_connect_frees_its_slot_for_a_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    async with upstream(answer_each) as up:
        pool = pool_for(up.port, limit=1, pool_timeout=5.0)
        real_connect = pool._connect
        release = asyncio.Event()
        calls = 0

        async def first_connect_fails(loop: asyncio.AbstractEventLoop) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:  # failure injection: the first connect fails once the second caller waits
                await release.wait()
                raise ConnectFailed("injected")
            return await real_connect(loop)

        monkeypatch.setattr(pool, "_connect", first_connect_fails)
        try:
            first = asyncio.ensure_future(pool.send("POST", "/x", b"a"))
            await asyncio.sleep(0.05)
            second = asyncio.ensure_future(pool.send("POST", "/x", b"b"))
            await asyncio.sleep(0.05)  # the second waits for the only slot
            release.set()
            with pytest.raises(ConnectFailed):
                await first
            resp = await asyncio.wait_for(second, 2.0)  # well before the 5 s pool timeout
            assert await resp.read() == b"echo:b"
            resp.release()
        finally:
            await pool.close()
