"""The floor under the gateway benchmarks: uvicorn relaying a request upstream, no gateway.

``bench/gateway_overhead.py`` runs this as its ``bare`` row, exactly as it runs Turnout (one
uvicorn worker, uvloop + httptools, on the same core, against the same fault server), and
``bench/real_backends.py`` in front of each engine: the body POSTed to the same path upstream
as received over pooled keep-alive connections, and the answer passed back. No validation,
routing, metrics, auth or error mapping. What Turnout adds beyond this row is its own logic;
this row itself is what the libraries the project chose and the extra hop cost on this machine.

The upstream client is Turnout's own, ``backends/upstream_pool.py`` (``--client pool``, the
default), or aiohttp's (``--client aiohttp``), which Turnout used before: the gateway-overhead
benchmark runs both, so the difference the client makes stays measured.

    python bench/bare_proxy.py UPSTREAM_URL PORT [--client pool|aiohttp]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
Relay = Callable[[str, bytes], Awaitable[tuple[int, bytes]]]


def pool_relay(upstream: str) -> tuple[Relay, Callable[[], Awaitable[None]]]:
    from backends.upstream_pool import UpstreamPool

    pool = UpstreamPool(
        upstream,
        limit=256,
        connect_timeout=5,
        read_timeout=60,
        pool_timeout=5,
        headers={"content-type": "application/json"},
    )

    async def relay(path: str, body: bytes) -> tuple[int, bytes]:
        response = await pool.send("POST", path, body)
        try:
            return response.status, await response.read()
        finally:
            response.release()

    return relay, pool.close


def aiohttp_relay(upstream: str) -> tuple[Relay, Callable[[], Awaitable[None]]]:
    import aiohttp

    base = upstream.rstrip("/")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=256, limit_per_host=0), auto_decompress=False
    )
    headers = {"content-type": "application/json"}

    async def relay(path: str, body: bytes) -> tuple[int, bytes]:
        async with session.post(base + path, data=body, headers=headers) as response:
            return response.status, await response.read()

    return relay, session.close


def make_app(upstream: str, client: str = "pool") -> Any:
    made: list[tuple[Relay, Callable[[], Awaitable[None]]]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    made.append((pool_relay if client == "pool" else aiohttp_relay)(upstream))
                else:
                    await made[0][1]()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, answer = await made[0][0](scope["path"], body)
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": answer})

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("upstream")
    parser.add_argument("port", type=int)
    parser.add_argument("--client", choices=("pool", "aiohttp"), default="pool")
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.upstream, args.client),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
