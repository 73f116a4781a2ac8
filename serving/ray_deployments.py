"""The two Ray Serve deployments behind the gateway replicas: an embedded engine, and the rate counter.

Where they sit: Ray Serve's proxy → ``TurnoutGateway`` (``serving.ray_app``) → through deployment
handles → :class:`TurnoutEngine` (one ONNX Runtime GenAI engine per replica, called by
``backends.ray_engine``) and :class:`TurnoutRateCounter` (the per-key token buckets all gateway
replicas share, called by ``serving.ratelimit_shared.SharedLimiter`` through :class:`HandleCounter`).

Plain classes: ``serving.ray_app`` turns them into deployments with ``serve.deployment``, so
they stay typed and can be exercised without Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from backends.base import Chunk, Completion, GenerateRequest
from backends.settings import EmbeddedSettings
from serving.ratelimit_shared import LocalLimiter


class TurnoutEngine:
    """One embedded engine in this replica's process; it starts loading as the replica starts."""

    def __init__(self, variant: str, settings: dict[str, Any]) -> None:
        from backends.embedded import EmbeddedBackend

        self.backend = EmbeddedBackend(variant, EmbeddedSettings.model_validate(settings))
        self._starting: asyncio.Task[None] | None = None
        # Under Ray Serve the constructor runs inside the replica's event loop; built outside a
        # replica (no loop) the engine starts on the first call instead.
        with contextlib.suppress(RuntimeError):
            self._starting = asyncio.get_running_loop().create_task(self.backend.start())

    async def _started(self) -> Any:
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self.backend.start())
        await asyncio.shield(self._starting)
        return self.backend

    async def ping(self) -> bool:
        """True once the model is loaded (the gateway replicas wait for this before serving)."""
        await self._started()
        return True

    async def complete(self, request: GenerateRequest) -> Completion:
        backend = await self._started()
        result: Completion = await backend.complete(request)
        return result

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        backend = await self._started()
        async for chunk in backend.stream(request):
            yield chunk


class TurnoutRateCounter:
    """The token buckets of every key, shared by all gateway replicas (one replica, in memory)."""

    def __init__(self) -> None:
        self.limiter = LocalLimiter()

    async def ping(self) -> bool:
        return True

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        return self.limiter.admit_now(key, rpm, tpm)

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        self.limiter.charge(key, tokens, tpm)


class HandleCounter:
    """``serving.ratelimit_shared.Counter`` over the counter deployment's handle."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def admit(self, key: str, rpm: int | None, tpm: int | None) -> float | None:
        answer: float | None = await self.handle.admit.remote(key, rpm, tpm)
        return answer

    async def charge(self, key: str, tokens: int, tpm: int | None) -> None:
        await self.handle.charge.remote(key, tokens, tpm)
