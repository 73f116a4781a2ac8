"""An embedded variant served by its own Ray Serve deployment, reached through a deployment handle.

Under ``turnout serve --ray`` (``serving.ray_app``) each embedded variant runs as a
``TurnoutEngine`` deployment whose replicas hold one engine each; the gateway replicas hold
this adapter instead of the engine, behind the same :class:`~backends.base.Backend` protocol.
Requests and answers cross the handle as the plain dataclasses of ``backends.base``; streams
use ``handle.options(stream=True)``, so chunks arrive as the engine yields them.

Failures: a typed gateway error raised in the engine (queue full → 429, bad input → 400)
comes back as itself. A replica that died, or is gone while the call is routed, is a
:class:`BackendUnavailable`; such a call is sent once more (Ray routes it to another
replica) when no chunk has reached the client yet, as ``backends.replica_set`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from backends.base import BackendInfo, Chunk, Completion, GenerateRequest
from serving.errors import BackendError, BackendUnavailable, TurnoutError

_ATTEMPTS = 2


def _translate(exc: BaseException, name: str) -> TurnoutError:
    """A Ray error from the engine deployment → the gateway's typed error."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, TurnoutError):
        return exc
    if isinstance(cause, TurnoutError):
        return cause
    from ray import exceptions as ray_errors

    gone = (ray_errors.ActorDiedError, ray_errors.ActorUnavailableError, ray_errors.RayActorError)
    if isinstance(exc, gone) or isinstance(cause, gone):
        gone_name = type(exc).__name__
        return BackendUnavailable(f"variant {name!r}: its Ray Serve engine replica is gone ({gone_name})")
    return BackendError(f"variant {name!r}: Ray Serve engine failed: {type(exc).__name__}: {exc}")


class RayEngineBackend:
    """The gateway side of one ``TurnoutEngine`` deployment."""

    def __init__(self, name: str, handle: Any, info: BackendInfo) -> None:
        self.name = name
        self.handle = handle
        self.info = info

    async def start(self) -> None:
        """Nothing to open: Ray Serve starts the engine replicas before the gateway's."""

    async def close(self) -> None:
        """The engine replicas belong to Ray Serve."""

    def ready(self) -> bool:
        return True

    async def complete(self, request: GenerateRequest) -> Completion:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                result: Completion = await self.handle.complete.remote(request)
                return result
            except Exception as exc:
                error = _translate(exc, self.name)
                if not isinstance(error, BackendUnavailable) or attempt == _ATTEMPTS:
                    raise error from None
        raise AssertionError("unreachable")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        for attempt in range(1, _ATTEMPTS + 1):
            started = False
            try:
                async for chunk in self.handle.options(stream=True).stream.remote(request):
                    started = True
                    yield chunk
                return
            except Exception as exc:
                error = _translate(exc, self.name)
                if started or not isinstance(error, BackendUnavailable) or attempt == _ATTEMPTS:
                    raise error from None
