"""`turnout serve` bounds each connection: head size (431), head and body time, unread answers.

uvicorn's httptools protocol alone took a 50 MB header line whole and kept connections that sent
nothing, dribbled a body or never read their answer for as long as the client liked. A real
gateway process (a fault server as its upstream; one-second timeouts) is driven over raw
sockets: each bound closes what it should and is counted in /metrics by reason, requests inside
the bounds (slow heads, pipelined requests behind a large body) are served, and the process keeps
serving.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import orjson
import pytest

from backends.fault import FaultServer
from serving.http_protocol import body_timeout_response, head_timeout_response, head_too_large_response
from serving.launcher import Launched
from tests.integration.control_plane import chat, fault_variant, metric_value, running_gateway, write_config

LIMIT = 4096


TIMEOUT_S = 1.0
BIG_REPLY = "word " * 2_400_000  # 12 MB: more than the socket buffers hold (up to 4 MB each way)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with FaultServer() as upstream, FaultServer(reply=BIG_REPLY, chunks=400) as big:
        config = write_config(
            tmp_path_factory.mktemp("head") / "gateway.yaml",
            {"fault": fault_variant(upstream), "big": fault_variant(big)},
            {"chat": {"targets": [{"variant": "fault"}]}, "big": {"targets": [{"variant": "big"}]}},
            server={
                "max_header_bytes": LIMIT,
                "header_timeout_s": TIMEOUT_S,
                "body_timeout_s": TIMEOUT_S,
                "send_stall_timeout_s": TIMEOUT_S,
            },
        )
        with running_gateway(config) as launched:
            yield launched


def _connect(gateway: Launched) -> socket.socket:
    address = urlsplit(gateway.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    return sock


def _refusals(gateway: Launched, reason: str) -> float:
    return metric_value(gateway.url, "turnout_connection_refusals_total", reason=reason)


def _read_all(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _read_answer(sock: socket.socket) -> bytes:
    """One answer with a content-length, whole (its head and body may come in separate reads)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_head_growing_past_the_bound_gets_431_and_the_connection_closes(gateway: Launched) -> None:
    before = _refusals(gateway, "head_too_large")
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
    assert _refusals(gateway, "head_too_large") == before + 1


def test_a_head_over_the_bound_sent_in_one_read_gets_431_too(gateway: Launched) -> None:
    """Measured once parsed (a head in one small read is not counted by reads)."""
    before = _refusals(gateway, "head_too_large")
    with _connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-filler: " + b"a" * (LIMIT * 2) + b"\r\n\r\n")
        answer = _read_all(sock)
    assert answer == head_too_large_response(LIMIT)
    assert _refusals(gateway, "head_too_large") == before + 1
    with _connect(gateway) as sock:  # just under the bound, in one read: served
        sock.sendall(
            b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-filler: " + b"a" * 3900 + b"\r\n\r\n"
        )
        assert _read_all(sock).startswith(b"HTTP/1.1 200 ")


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


def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout(gateway: Launched) -> None:
    before = _refusals(gateway, "silent_connection")
    started = time.monotonic()
    with _connect(gateway) as sock:
        assert _read_all(sock) == b""  # closed, no answer: there was no request
    assert TIMEOUT_S * 0.9 <= time.monotonic() - started < TIMEOUT_S + 2
    assert _refusals(gateway, "silent_connection") == before + 1


def test_a_head_dribbled_past_the_head_timeout_gets_408(gateway: Launched) -> None:
    before = _refusals(gateway, "head_timeout")
    with _connect(gateway) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        try:
            for _ in range(20):  # one header byte every 0.2 s: under every size bound, never done
                sock.sendall(b"x")
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _read_all(sock)
    assert answer == head_timeout_response(TIMEOUT_S)
    assert chat(gateway.url).status_code == 200
    assert _refusals(gateway, "head_timeout") == before + 1


def test_a_body_that_stops_arriving_gets_408_after_the_body_timeout(gateway: Launched) -> None:
    before = metric_value(gateway.url, "turnout_rejected_requests_total", status="499")
    refused = _refusals(gateway, "body_timeout")
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b'content-length: 100\r\n\r\n{"model": '
        )
        assert _read_all(sock) == body_timeout_response(TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S + 2
    assert metric_value(gateway.url, "turnout_rejected_requests_total", status="499") == before + 1
    assert _refusals(gateway, "body_timeout") == refused + 1
    assert chat(gateway.url).status_code == 200


def test_a_request_answered_before_its_body_came_still_closes_when_idle(gateway: Launched) -> None:
    """A 404 (or 413, 405) sent before the body had all come: the rest of the body cancelled the
    keep-alive timer and the connection stayed open for good (QA held 20 for minutes)."""
    with _connect(gateway) as sock:
        sock.sendall(b"POST /nowhere HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n")
        assert _read_answer(sock).startswith(b"HTTP/1.1 404 ")  # answered with no body read
        time.sleep(0.2)
        started = time.monotonic()
        sock.sendall(b"0123456789")  # the body, after the answer
        assert _read_all(sock) == b""  # closed: keep-alive (uvicorn's 5 s), not never
    assert time.monotonic() - started < 5 + 2


def test_a_request_after_an_early_answered_one_is_not_cut_by_its_keep_alive(gateway: Launched) -> None:
    """The keep-alive armed once that body ended closed the next request's stream at 5 s when the
    next request came in the same read (review: 26 of 63 events, no [DONE])."""
    body = orjson.dumps({
        "model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "x_fault": "slow_chunks=800",  # 8 chunks: 6.4 s, past the 5 s keep-alive
    })  # fmt: skip
    with _connect(gateway) as sock:
        sock.sendall(b"POST /nowhere HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n")
        assert _read_answer(sock).startswith(b"HTTP/1.1 404 ")
        sock.sendall(
            b"0123456789POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" in answer, answer[-300:]


def test_a_body_refused_for_its_length_and_never_sent_is_not_counted_twice(gateway: Launched) -> None:
    """The 413 is counted as that; the connection then closed by the body bound was also counted
    as a body_timeout refusal (QA: one request, two counts)."""
    refused = _refusals(gateway, "body_timeout")
    with _connect(gateway) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 10485760\r\n\r\n" + b"x" * 100
        )
        assert _read_answer(sock).startswith(b"HTTP/1.1 413 ")
        assert _read_all(sock) == b""  # closed once the body stopped coming
    assert _refusals(gateway, "body_timeout") == refused


def test_a_slow_but_steady_body_is_never_cut(gateway: Launched) -> None:
    """The body bound is the wait between reads (nginx's), not a deadline for the whole body."""
    payload = orjson.dumps({"model": "chat", "messages": [{"role": "user", "content": "x" * 3000}]})
    with _connect(gateway) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(payload)
        )
        for start in range(0, len(payload), 500):  # ~3 s in all, never idle for 1 s
            sock.sendall(payload[start : start + 500])
            time.sleep(0.45)
        assert _read_all(sock).startswith(b"HTTP/1.1 200 ")


def test_a_client_that_stops_reading_its_answer_is_dropped(gateway: Launched) -> None:
    before = metric_value(gateway.url, "turnout_requests_total", route="big", status="499")
    stalls = _refusals(gateway, "send_stall")
    body = orjson.dumps({"model": "big", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
    address = urlsplit(gateway.url)
    sock.connect((address.hostname, address.port))
    with sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body
        )
        deadline = time.monotonic() + TIMEOUT_S + 8  # 12 MB to fill the buffers, then the stall bound
        while metric_value(gateway.url, "turnout_requests_total", route="big", status="499") == before:
            assert time.monotonic() < deadline, "the stalled reader was never dropped"
            time.sleep(0.2)
        sock.settimeout(5)
        received = b""
        try:
            while chunk := sock.recv(1 << 20):  # what the kernel had buffered, then the end
                received += chunk
        except ConnectionResetError:
            pass
    assert received.startswith(b"HTTP/1.1 200 ") and b"data: [DONE]" not in received
    assert _refusals(gateway, "send_stall") == stalls + 1
    assert chat(gateway.url).status_code == 200


@pytest.mark.parametrize(
    "garbage",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
        b"G@T / HTTP/1.1\r\nhost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello to the plain-HTTP port
    ],
)
def test_bytes_that_are_no_http_request_get_a_400_in_the_openai_shape(
    gateway: Launched, garbage: bytes
) -> None:
    """uvicorn's own answer was plain text ("Invalid HTTP request received.")."""
    before = _refusals(gateway, "malformed_request")
    with _connect(gateway) as sock:
        sock.sendall(garbage)
        answer = _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    error = orjson.loads(body)["error"]
    assert error["code"] == "invalid_http_request" and error["type"] == "invalid_request_error"
    assert "not a well-formed HTTP/1.1 request" in error["message"]
    assert _refusals(gateway, "malformed_request") == before + 1
    assert chat(gateway.url).status_code == 200
