"""A real aiohttp web app on 127.0.0.1 as a scripted upstream, for the adapter tests that need
one behaviour a real engine does not show on demand (cookies, compression)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """``app`` listening on 127.0.0.1 until the block ends; yields its port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
