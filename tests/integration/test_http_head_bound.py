"""`turnout serve` bounds a request's head: past ``server.max_header_bytes``, 431 and close.

httptools alone took a 50 MB header line whole. A real gateway process (a fault server as its
upstream) is sent heads over raw sockets: one that grows read by read is refused with the
OpenAI error shape, one under the bound and pipelined requests behind a large body are served,
and the process keeps serving.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import orjson
import pytest

from backends.fault import FaultServer
from serving.http_protocol import head_too_large_response
from serving.launcher import Launched
from tests.integration.control_plane import chat, fault_variant, running_gateway, write_config

LIMIT = 4096


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with FaultServer() as upstream:
        config = write_config(
            tmp_path_factory.mktemp("head") / "gateway.yaml",
            {"fault": fault_variant(upstream)},
            {"chat": {"targets": [{"variant": "fault"}]}},
            server={"max_header_bytes": LIMIT},
        )
        with running_gateway(config) as launched:
            yield launched


def _connect(gateway: Launched) -> socket.socket:
    address = urlsplit(gateway.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_head_growing_past_the_bound_gets_431_and_the_connection_closes(gateway: Launched) -> None:
    with _connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-filler: ")
        sent = 0
        try:
            while sent < 50 * LIMIT:  # far past the bound, in separate reads
                sock.sendall(b"a" * 1024)
                sent += 1024
                time.sleep(0.002)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed while we were still sending: what we want
        answer = _read_all(sock)
    assert sent < 50 * LIMIT or answer, "the server neither answered nor closed"
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert orjson.loads(body)["error"] == {
        "message": f"the request line and headers exceed {LIMIT} bytes",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_header_fields_too_large",
    }
    assert answer == head_too_large_response(LIMIT)
    assert chat(gateway.url).status_code == 200  # the process keeps serving


def test_a_head_under_the_bound_sent_slowly_is_served(gateway: Launched) -> None:
    with _connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        for _ in range(3):
            sock.sendall(b"x-filler: " + b"a" * 900 + b"\r\n")
            time.sleep(0.02)
        sock.sendall(b"connection: close\r\n\r\n")
        assert _read_all(sock).startswith(b"HTTP/1.1 200 ")


def test_pipelined_requests_behind_a_large_body_are_not_counted_as_head(gateway: Launched) -> None:
    payload = orjson.dumps({"model": "chat", "messages": [{"role": "user", "content": "a" * 200_000}]})
    first = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(payload)
    ) + payload
    second = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    with _connect(gateway) as sock:
        sock.sendall(first + second[:20])  # the second head starts inside the first body's reads
        time.sleep(0.05)
        sock.sendall(second[20:])
        answer = _read_all(sock)
    assert answer.count(b"HTTP/1.1 200 ") == 2, answer[:300]
