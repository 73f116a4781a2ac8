"""Keeps this process's route table and key ring in step with the shared route store.

Started in the app's lifespan: seeds version 1 of every configured route that the store
does not know yet, loads what is in force, then polls the store's change marker (one
cheap query every ``poll_interval_s``) and reloads when any process — this one's admin
API, another gateway, the canary controller, ``turnout keys`` — has written. A stored
version this process cannot serve (it names a variant this process does not have) is
logged and the previous version stays in force. The store holds the truth: where a config
file was edited after the store seeded its route, the stored version replaces the file's
at start-up, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from serving.access import Access
from serving.gateway import Gateway
from serving.routing.routed import ActiveRoute
from serving.routing.spec import RouteSpec, problems
from serving.store import ApiKeyRecord, RouteStore, RouteVersion

log = logging.getLogger("turnout.routes")


class RouteSync:
    def __init__(self, store: RouteStore, gateway: Gateway, access: Access, interval_s: float) -> None:
        self.store = store
        self._gateway = gateway
        self._access = access
        self._interval = interval_s
        self._marker = -1
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self, seed: dict[str, RouteSpec]) -> None:
        await asyncio.to_thread(self.store.seed, seed)
        await self.refresh()
        self._task = asyncio.create_task(self._poll())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.store.close)

    async def refresh(self, force: bool = False) -> None:
        async with self._lock:
            marker = self.store.change_marker_nowait()  # ~10 µs on a SQLite file, on the loop
            if marker is None:  # another database, or SQLite busy: ask from a thread
                marker = await asyncio.to_thread(self.store.change_marker)
            if marker == self._marker and not force:
                return
            current, keys = await asyncio.to_thread(self._read)
            self._apply(current)
            self._access.reload(keys)
            self._marker = marker

    def _read(self) -> tuple[dict[str, RouteVersion], list[ApiKeyRecord]]:
        # Revoked keys too: the KeyRing refuses them, even when one is also $TURNOUT_ADMIN_TOKEN.
        return self.store.current(), list(self.store.keys(include_revoked=True))

    def _apply(self, current: dict[str, RouteVersion]) -> None:
        known = frozenset(self._gateway.backends)
        table = dict(self._gateway.routes)
        for name, stored in current.items():
            in_force = table.get(name)
            if in_force is not None and in_force.version == stored.version and in_force.spec == stored.spec:
                continue
            # Same number, other spec: the table came from a config file edited since the store
            # seeded the route (only at start-up); the store holds the truth.
            edited = in_force is not None and in_force.version == stored.version
            found = problems(stored.spec, known)
            if found:
                problem = "; ".join(found)
                log.error("route %s v%d cannot be served here: %s", name, stored.version, problem)
                if edited:
                    log.error("route %s: serving the config file's spec, which the store does not hold", name)
                continue
            table[name] = ActiveRoute(name, stored.version, stored.spec, stored.created_at)
            if edited:
                log.warning(
                    "route %s: the config file's spec differs from the store's v%d; serving the store's "
                    "(the file only seeds a route the store does not have: change it with "
                    "`turnout routes set`, or start on a new store)",
                    name,
                    stored.version,
                )
            elif in_force is not None:
                log.info("route %s: v%d → v%d (%s)", name, in_force.version, stored.version, stored.action)
        self._gateway.apply(table)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.refresh()
            except Exception:  # a store hiccup must not stop polling; the table in force stays
                log.exception("route store poll failed")
