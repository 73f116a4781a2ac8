"""The Triton gRPC transport reconnects promptly when its server comes back.

gRPC's default reconnect backoff (1 s, x1.6, up to 120 s) kept calls failing with UNAVAILABLE for
seconds after a restarted Triton was listening again, long enough to open the variant's breaker.
A real gRPC server (no services: any call is UNIMPLEMENTED, which proves the channel connected)
starts on the port after five seconds of refused calls.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from backends.settings import TritonSettings
from backends.triton_grpc import RECONNECT_BACKOFF_MS, TritonGrpc
from serving.errors import BackendUnavailable, TurnoutError
from serving.launcher import free_port

grpc = pytest.importorskip("grpc", reason="needs tritonclient[grpc]: pip install 'turnout[triton]'")

DOWN_S = 5.0  # refused calls long enough for the default backoff to have grown past 2.5 s


async def _call(transport: TritonGrpc) -> TurnoutError:
    try:
        await transport.model_config("tiny")
    except TurnoutError as exc:
        return exc
    raise AssertionError("a server with no services cannot answer model_config")


async def test_a_server_that_comes_back_is_reached_within_the_backoff_cap() -> None:
    port = free_port()
    settings = TritonSettings(grpc_url=f"127.0.0.1:{port}", protocol="grpc", model="tiny")
    transport = TritonGrpc("tiny", settings)
    await transport.start()
    server = grpc.aio.server()
    try:
        until = time.monotonic() + DOWN_S
        while time.monotonic() < until:
            assert isinstance(await _call(transport), BackendUnavailable)
            await asyncio.sleep(0.05)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        back = time.monotonic()
        while isinstance(error := await _call(transport), BackendUnavailable):
            await asyncio.sleep(0.02)
        reconnected_after = time.monotonic() - back
        assert "unimplemented" in error.message.lower() or error.status == 400, error.message
        cap_s = RECONNECT_BACKOFF_MS["grpc.max_reconnect_backoff_ms"] / 1000
        assert reconnected_after < 2 * cap_s, f"reconnected {reconnected_after:.2f} s after it came back"
    finally:
        await transport.close()
        await server.stop(None)
