"""The floor under the gateway benchmarks: uvicorn + aiohttp relaying a request, no gateway.

``bench/gateway_overhead.py`` runs this as its ``bare`` row, exactly as it runs Turnout (one
uvicorn worker, uvloop + httptools, on the same core, against the same fault server), and
``bench/real_backends.py`` next to its control row: one pooled keep-alive aiohttp session,
the body POSTed to the same path upstream as received, and the answer passed back. No
validation, routing, metrics, auth or error mapping. What Turnout adds beyond this row is
its own logic; this row itself is what the two libraries the project chose (uvicorn,
aiohttp) and the extra hop cost on this machine.

    python bench/bare_proxy.py UPSTREAM_URL PORT
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import uvicorn

_session: list[aiohttp.ClientSession] = []


def make_app(upstream: str) -> Any:
    base = upstream.rstrip("/")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    connector = aiohttp.TCPConnector(limit=256, limit_per_host=0)
                    _session.append(aiohttp.ClientSession(connector=connector, auto_decompress=False))
                else:
                    await _session[0].close()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {"content-type": "application/json"}
        async with _session[0].post(base + scope["path"], data=body, headers=headers) as upstream_response:
            answer = await upstream_response.read()
            status = upstream_response.status
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": answer})

    return app


if __name__ == "__main__":
    uvicorn.run(make_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), loop="uvloop",
                http="httptools", log_level="warning", access_log=False)
