"""An embedded variant served by its own Ray Serve deployment, reached through a deployment handle.

Under ``turnout serve --ray`` (``serving.ray_app``) each embedded variant runs as a
``TurnoutEngine`` deployment whose replicas hold one engine each; the gateway replicas hold
this adapter instead of the engine, behind the same :class:`~backends.base.Backend` protocol.
Requests and answers cross the handle as the plain dataclasses of ``backends.base``; streams
use ``handle.options(stream=True)``, so chunks arrive as the engine yields them.

Engine figures: the engines report to the counter deployment (``serving.ray_deployments``);
:class:`EngineFigures` reads them there once per ``POLL_S`` for this gateway replica, and each
adapter turns them into the same ``/metrics`` as the in-process engine: ``turnout_queue_depth``
and ``turnout_engine_generated_tokens_total`` summed over the variant's engine replicas, and
``turnout_batch_size`` fed with the batches formed since the last read. They describe the
engine deployment, so every gateway replica shows the same values (do not sum them across
gateway replicas).

Failures: a typed gateway error raised in the engine (queue full → 429, bad input → 400)
comes back as itself. A replica that died, or is gone while the call is routed, is a
:class:`BackendUnavailable`; such a call is sent once more (Ray routes it to another
replica) when no chunk has reached the client yet, as ``backends.replica_set`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from backends.base import BackendInfo, Chunk, Completion, Embeddings, EmbedRequest, GenerateRequest
from serving.errors import BackendError, BackendUnavailable, TurnoutError

_ATTEMPTS = 2
POLL_S = 1.0
FORGET_S = 600.0  # an engine replica unread this long is gone (far longer than a counter restart)
log = logging.getLogger("turnout")

Figures = Mapping[str, Mapping[str, Any]]  # engine replica → its figures


def new_batches(before: Figures, now: Figures) -> dict[int, int]:
    """Batches formed (size → count) between two reads of one variant's replicas' cumulative
    counts; a replica new or restarted since (its counts went down) counts from zero."""
    formed: dict[int, int] = {}
    for replica, figures in now.items():
        counts = figures.get("batches", {})
        old = before.get(replica, {}).get("batches", {})
        restarted = any(counts.get(size, 0) < seen for size, seen in old.items())
        for size, count in counts.items():
            added = count - (0 if restarted else old.get(size, 0))
            if added > 0:
                formed[int(size)] = formed.get(int(size), 0) + added
    return formed


class EngineFigures:
    """This gateway replica's copy of every engine replica's figures, read from the counter."""

    def __init__(self, board: Any, poll_s: float = POLL_S) -> None:
        self.board = board
        self.poll_s = poll_s
        self.latest: dict[str, Figures] = {}
        # Each engine replica's counts already fed to the histogram, kept across reads that miss
        # it: a restarted counter answers with nothing for a while, and a replica reporting
        # again would otherwise be counted anew, its whole history a second time.
        self._counted: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._seen: dict[tuple[str, str], float] = {}  # (variant, replica) → when last read
        self.observers: dict[str, Callable[[int], None]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def apply(self, read: Mapping[str, Figures], now: float | None = None) -> None:
        """Take a read: keep it, and feed each variant's batch observer what was formed since.
        A replica unread for ``FORGET_S`` (gone: autoscaled down, restarted under a new id) is
        forgotten, so the baselines do not grow for the gateway's whole life."""
        now = time.monotonic() if now is None else now
        for variant, replicas in read.items():
            self._seen.update(dict.fromkeys(((variant, replica) for replica in replicas), now))
            counted = self._counted.setdefault(variant, {})
            observer = self.observers.get(variant)
            if observer is not None:
                for size, count in new_batches(counted, replicas).items():
                    for _ in range(count):
                        observer(size)
            counted.update(replicas)
        for variant, replica in [key for key, at in self._seen.items() if now - at > FORGET_S]:
            del self._seen[(variant, replica)]
            self._counted.get(variant, {}).pop(replica, None)
        self.latest = {variant: dict(replicas) for variant, replicas in read.items()}

    async def _poll(self) -> None:
        while True:
            try:
                self.apply(await asyncio.wait_for(self.board.engine_figures.remote(), 2 * self.poll_s))
            except Exception as exc:  # the counter restarting; the gauges keep the last read
                log.debug("engine figures not read: %s", exc)
            await asyncio.sleep(self.poll_s)

    def stats(self, variant: str) -> dict[str, float]:
        replicas = self.latest.get(variant, {}).values()
        return {
            "queue_depth": float(sum(f.get("queue_depth", 0.0) for f in replicas)),
            "generated_tokens": float(sum(f.get("generated_tokens", 0.0) for f in replicas)),
        }


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

    def __init__(
        self, name: str, handle: Any, info: BackendInfo, figures: EngineFigures | None = None
    ) -> None:
        self.name = name
        self.handle = handle
        self.info = info
        self.figures = figures

    async def start(self) -> None:
        """Nothing to open (Ray Serve starts the engine replicas); starts reading engine figures."""
        if self.figures is not None:
            self.figures.start()

    async def close(self) -> None:
        """The engine replicas belong to Ray Serve; stops reading engine figures."""
        if self.figures is not None:
            await self.figures.close()

    def engine_stats(self) -> dict[str, float]:
        return self.figures.stats(self.name) if self.figures is not None else {"queue_depth": 0.0}

    def set_batch_observer(self, observer: Callable[[int], None]) -> None:
        if self.figures is not None:
            self.figures.observers[self.name] = observer

    def ready(self) -> bool:
        return True

    async def _call(self, method: str, request: Any) -> Any:
        """The engine deployment's ``method`` on ``request``; once more if its replica is gone."""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return await getattr(self.handle, method).remote(request)
            except Exception as exc:
                error = _translate(exc, self.name)
                if not isinstance(error, BackendUnavailable) or attempt == _ATTEMPTS:
                    raise error from None
        raise AssertionError("unreachable")

    async def complete(self, request: GenerateRequest) -> Completion:
        result: Completion = await self._call("complete", request)
        return result

    async def embed(self, request: EmbedRequest) -> Embeddings:
        result: Embeddings = await self._call("embed", request)
        return result

    async def count_tokens(self, request: GenerateRequest) -> int:
        result: int = await self._call("count_tokens", request)
        return result

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
