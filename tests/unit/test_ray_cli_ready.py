"""``turnout serve --ray`` says the gateway is up only once it serves.

``serve.run`` returns before Serve's proxy has learned the application's route; for a few
seconds the proxy answered every request with its own text/plain 404 while the command had
already printed the address. A real HTTP server on 127.0.0.1 plays the proxy learning late.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from serving.ray_cli import _wait_until_ready


class LateProxy(BaseHTTPRequestHandler):
    answers: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        status = self.answers.pop(0) if self.answers else 200
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def proxy() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), LateProxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_waits_through_the_proxys_404s_until_ready_answers(proxy: ThreadingHTTPServer) -> None:
    LateProxy.answers = [404, 404, 503]
    assert _wait_until_ready("0.0.0.0", proxy.server_address[1], threading.Event())
    assert LateProxy.answers == []  # every early answer was waited through


def test_a_proxy_set_in_the_environment_does_not_carry_the_local_probe(
    proxy: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    LateProxy.answers = []
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "")
    assert _wait_until_ready("127.0.0.1", proxy.server_address[1], threading.Event())


def test_a_stop_ends_the_wait(proxy: ThreadingHTTPServer) -> None:
    LateProxy.answers = [404] * 1000
    stop = threading.Event()
    stop.set()
    assert _wait_until_ready("127.0.0.1", proxy.server_address[1], stop)  # stopping: no complaint
    assert len(LateProxy.answers) == 1000
