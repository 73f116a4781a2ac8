"""A real, fast, scriptable OpenAI-compatible HTTP server: the fake upstream engine.

It sits at the far end of the request path (where vLLM or trtllm-serve would be) in
failure tests and in ``bench/gateway_overhead.py``. It is an ``asyncio.Protocol`` on
uvloop with the httptools parser (``backends/fault_protocol.py``), so one core serves
well over 5,000 req/s and the gateway under test is always the bottleneck. This module
starts it: :func:`serve`, the :class:`FaultServer` helper for tests, and the CLI.

Behaviour per request comes from the ``x-fault`` header, else the body field
``"x_fault"`` (reaches it through a gateway, which passes unknown fields on), else the
server's default script. A script is comma-separated directives::

    ok                 answer the fixed reply (``--reply``) in ``--chunks`` stream chunks
    echo               answer with the JSON body and headers it received, as the text
    latency=<ms>       sleep before answering
    error=<status>     OpenAI error body with that status (429 and 503 add Retry-After)
    retry_after=<s>    the Retry-After value for error=429/503 (default 1)
    cut=<n>            streaming: send n chunks, then drop the connection without [DONE]
    stall=<ms>         streaming: send one chunk, then stall for ms, then go on
    slow_chunks=<ms>   streaming: delay between chunks
    corrupt            a malformed JSON body, or a malformed SSE chunk after the first
    error_event=<n>    streaming: n chunks, then an in-stream ``{"error": ...}`` event
    drop               close the connection without answering
    close              answer, then close the connection (as an idle timeout would)
    usage_every        streaming: every chunk carries the usage so far (vLLM's
                       ``continuous_usage_stats``)
    bad_content        well-formed JSON whose content is a number, not text (the second
                       chunk of a stream)

``POST /v1/embeddings`` answers one vector of 8 floats per input (from a hash of it: the same
input, the same vector); ``latency``, ``error``, ``corrupt``, ``drop`` and ``close`` apply to it.
"refuse" is simply a port where nothing listens. ``GET /stats`` counts requests and
connections (``POST /stats/reset`` zeroes them); ``GET /health`` answers 200. ``GET /metrics``
answers Prometheus text in vLLM's names (``vllm:num_requests_waiting``, ``..._running``,
``vllm:kv_cache_usage_perc``), with the values ``POST /load?waiting=N&running=M&kv=F`` set
(any subset; all 0 at start), so balancing tests can make one replica look loaded.
Run it with ``python -m backends.fault --port P``; tests use :class:`FaultServer`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import orjson

from backends.fault_protocol import FaultConnection
from backends.fault_script import DEFAULT_REPLY, FaultApp, Script, parse_script, split_reply

__all__ = [
    "DEFAULT_REPLY",
    "FaultApp",
    "FaultServer",
    "Script",
    "main",
    "parse_script",
    "serve",
    "split_reply",
]


async def serve(
    host: str,
    port: int,
    app: FaultApp,
    ready: threading.Event | None = None,
    stop: asyncio.Event | None = None,
    bound: list[int] | None = None,
) -> None:
    """Serve until ``stop`` is set (forever when None)."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: FaultConnection(app), host, port, backlog=1024, reuse_address=True
    )
    if bound is not None:
        bound.append(server.sockets[0].getsockname()[1])
    if ready is not None:
        ready.set()
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        server.close()
        for transport in list(app.conns):
            transport.abort()
        await asyncio.sleep(0)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class FaultServer:
    """Start a fault server for a test or benchmark; ``with FaultServer() as fs: fs.base_url``.

    In-process (a background thread with its own event loop) by default; ``process=True``
    runs ``python -m backends.fault`` instead, pinned with ``taskset -c cpu`` when given.
    """

    def __init__(
        self,
        *,
        default: str = "ok",
        reply: str = DEFAULT_REPLY,
        chunks: int = 8,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        process: bool = False,
        cpu: int | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.host, self.port = host, port
        self.options = {"default": default, "reply": reply, "chunks": chunks, "model": model}
        self.use_process, self.cpu, self.start_timeout = process, cpu, start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> FaultServer:
        if self.use_process:
            self.port = self.port or _free_port(self.host)
            opts = self.options
            cmd = [
                sys.executable,
                "-m",
                "backends.fault",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--default",
                str(opts["default"]),
                "--reply",
                str(opts["reply"]),
                "--chunks",
                str(opts["chunks"]),
                "--model",
                str(opts["model"]),
            ]
            if self.cpu is not None and shutil.which("taskset"):
                cmd = ["taskset", "-c", str(self.cpu), *cmd]
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            self.proc = subprocess.Popen(cmd, cwd=root)
        else:
            self._start_thread()
        self._wait_healthy()
        return self

    def _start_thread(self) -> None:
        ready, bound = threading.Event(), list[int]()
        app = FaultApp(**self.options)  # type: ignore[arg-type]

        def run() -> None:
            loop = self._loop = _new_loop()
            self._stop = asyncio.Event()
            loop.run_until_complete(serve(self.host, self.port, app, ready, self._stop, bound))
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-server", daemon=True)
        self._thread.start()
        if not ready.wait(self.start_timeout):
            raise RuntimeError("fault server thread did not start")
        self.port = bound[0]

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"fault server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"fault server on {self.url} not healthy within {self.start_timeout}s")

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/stats", timeout=5.0) as resp:
            result: dict[str, Any] = orjson.loads(resp.read())
            return result

    def reset_stats(self) -> None:
        req = urllib.request.Request(self.url + "/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5.0):
            pass

    def set_load(
        self, *, waiting: float | None = None, running: float | None = None, kv: float | None = None
    ) -> dict[str, float]:
        """Set what ``GET /metrics`` reports (fields left None keep their value)."""
        fields = {"waiting": waiting, "running": running, "kv": kv}
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if v is not None})
        req = urllib.request.Request(f"{self.url}/load?{query}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5.0) as resp:
            result: dict[str, float] = orjson.loads(resp.read())
            return result

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)
            self.proc = None
        if self._thread is not None and self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(5.0)
            self._thread = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backends.fault", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8009)
    parser.add_argument("--default", default="ok", help="script for requests without x-fault")
    parser.add_argument("--reply", default=DEFAULT_REPLY)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--model", default="fake-model")
    args = parser.parse_args(argv)
    app = FaultApp(default=args.default, reply=args.reply, chunks=args.chunks, model=args.model)
    loop = _new_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fault server on http://{args.host}:{args.port} (default {args.default!r})", flush=True)
    loop.run_until_complete(serve(args.host, args.port, app, stop=stop))
    loop.close()


if __name__ == "__main__":
    main()
