"""The model configs a Triton variant shapes its requests by: read once, read again after a refusal.

Under ``backends/triton.py`` on the request path. A model's config (batch dimension, decoupled,
input datatypes) is read on first use and kept. A Triton restarted, or a model reloaded, with
another config refuses requests shaped for the old one; after such a refusal the config is read
again and, if it changed, the request is worth sending once more. One re-read serves every
request refused around the same time (each compares the config with the one it was sent by),
and a model's config is re-read at most every ``reread_floor_s``: a client's own bad requests,
refused for reasons of their own, cannot make the gateway hammer Triton's config endpoint.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from backends.triton_tensors import ModelFacts
from serving.errors import BackendError, TurnoutError

REREAD_FLOOR_S = 2.0

ReadConfig = Callable[[str], Awaitable[dict[str, Any]]]


class ModelConfigs:
    def __init__(
        self,
        variant: str,
        read: ReadConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        reread_floor_s: float = REREAD_FLOOR_S,
    ) -> None:
        self._variant, self._read, self._clock, self._floor = variant, read, clock, reread_floor_s
        self._facts: dict[str, ModelFacts] = {}
        self._lock = asyncio.Lock()
        self._rereads: dict[str, tuple[float, asyncio.Task[ModelFacts | None]]] = {}

    def cached(self, model: str) -> ModelFacts | None:
        return self._facts.get(model)

    async def facts(self, model: str) -> ModelFacts:
        """The model's config, read on first use (and again after a failed read)."""
        found = self._facts.get(model)
        if found is not None:
            return found
        async with self._lock:
            found = self._facts.get(model)
            if found is None:
                found = await self._fetch(model)
                self._facts[model] = found
        return found

    async def changed_since(self, sent_with: ModelFacts) -> bool:
        """After Triton refused a request shaped by ``sent_with``: whether the model's config is
        another now (then it is kept, and the request may go once more, shaped for it)."""
        model = sent_with.name
        now = self._clock()
        began, reread = self._rereads.get(model, (-math.inf, None))
        if reread is None or (reread.done() and now - began >= self._floor):
            reread = asyncio.ensure_future(self._fetch_or_none(model))
            self._rereads[model] = (now, reread)
        fresh = await asyncio.shield(reread)  # shared: one caller leaving does not cancel the rest
        if fresh is None or fresh == sent_with:
            return False
        self._facts[model] = fresh
        return True

    async def _fetch_or_none(self, model: str) -> ModelFacts | None:
        try:
            return await self._fetch(model)
        except TurnoutError:
            return None  # unreadable now: the request's own error stands

    async def _fetch(self, model: str) -> ModelFacts:
        config = await self._read(model)
        try:
            return ModelFacts.from_config(model, config)
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"Triton variant {self._variant}: malformed config of {model}") from exc
