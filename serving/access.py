"""Who may call, and how often: the API edge's use of ``serving.auth`` and ``serving.ratelimit``.

The client API handlers call :meth:`Access.client` before routing (401 for a missing or
unknown key unless anonymous clients are allowed, 429 with ``Retry-After`` when a key has
spent its requests or tokens per minute) and :meth:`Access.charge` once usage is known.
The admin API calls :meth:`Access.admin` with the role an endpoint needs. The key ring
is rebuilt by ``serving.route_sync`` whenever the store's keys change. A batch's requests
(``serving.batch_runner``) come in with a key of :meth:`Access.acting_for`, made in this process
and never sent anywhere, that acts as the key that made the batch, with its limits as they are
then (revoked since: a 401; ``batches.key_limits: false`` leaves the limits to its live requests).
It acts only inside :func:`acting_in_process`, which the runner wraps around each request it
sends into the app: the same key over the network, were it ever to leak, is a 401.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace

from serving.auth import (
    ACTING_KEY_PREFIX,
    ANONYMOUS,
    KeyLike,
    KeyRing,
    Principal,
    Role,
    authorize_admin,
    authorize_client,
    looks_issued,
    other_credentials,
)
from serving.auth import bearer_token as parse_bearer
from serving.config import AuthSettings
from serving.errors import RateLimited, Unauthorized
from serving.metrics import GatewayMetrics
from serving.ratelimit_shared import Limiter, LocalLimiter

# True in the context of a request the batch runner sends into the app (never over HTTP: uvicorn
# runs each request in a context copied from the server's, where it is False).
_IN_PROCESS: ContextVar[bool] = ContextVar("turnout_in_process_request", default=False)


@contextmanager
def acting_in_process() -> Iterator[None]:
    """Within this block (the runner's call of the app for one batch request), acting keys act."""
    token = _IN_PROCESS.set(True)
    try:
        yield
    finally:
        _IN_PROCESS.reset(token)


class Access:
    def __init__(
        self,
        settings: AuthSettings,
        metrics: GatewayMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        limiter: Limiter | None = None,
        batch_key_limits: bool = True,
    ) -> None:
        self._settings = settings
        self._batch_key_limits = batch_key_limits  # batches.key_limits
        self._metrics = metrics
        self._bootstrap = os.environ.get(settings.admin_token_env) or None
        # In-process buckets by default; serving.ray_app passes one shared by every replica.
        self.limiter: Limiter = limiter or LocalLimiter(clock)
        self.keyring = KeyRing((), bootstrap_admin_token=self._bootstrap)
        self._acting: dict[str, str] = {}  # in-process key → the owner (limit_key) it acts for
        self._acting_keys: dict[str, str] = {}  # and back

    def reload(self, records: Iterable[KeyLike]) -> None:
        self.keyring = KeyRing(records, bootstrap_admin_token=self._bootstrap)

    async def client(self, authorization: str | None, api_key_header: str | None = None) -> Principal:
        sent = [key for key in (parse_bearer(authorization), api_key_header) if key]
        if self._acting and sent and sent[0] in self._acting and _IN_PROCESS.get():
            acting = self._owner(self._acting[sent[0]])
            if acting.rpm is None and acting.tpm is None:
                return acting
            if not self._batch_key_limits:  # the key's limits are its live requests' alone
                return replace(acting, rpm=None, tpm=None)
            return await self._admitted(acting)
        principal = next((p for key in sent if (p := self.keyring.lookup(key)) is not None), None)
        # A key of Turnout's own shape anywhere, in either header or under another scheme
        # (Basic, as curl -u sends it, a bare key), is never taken as anonymous: it loses its limits.
        issued = principal is None and any(
            looks_issued(key) for key in (*sent, *other_credentials(authorization))
        )
        principal = authorize_client(
            principal,
            anonymous_allowed=self._settings.anonymous_clients,
            presented=bool(sent),
            authorization=authorization,
            issued_shape=issued,
        )
        if principal.rpm is None and principal.tpm is None:  # no await: the common case stays cheap
            return principal
        return await self._admitted(principal)

    async def _admitted(self, principal: Principal) -> Principal:
        """``principal``, once its key's limits let this request start (else a 429)."""
        wait = await self.limiter.admit(principal.limit_key, principal.rpm, principal.tpm)
        if wait is not None:
            self._metrics.rate_limited.labels(principal.name).inc()
            raise RateLimited(
                f"Rate limit reached for key '{principal.name}': "
                f"{principal.rpm or '∞'} requests and {principal.tpm or '∞'} tokens per minute",
                retry_after=wait,
            )
        return principal

    def acting_for(self, owner: str) -> str | None:
        """A key that acts as the caller whose stored things are ``owner``'s (``owner_of``), or
        None for the anonymous caller (its requests carry no key)."""
        if owner == ANONYMOUS.limit_key:
            return None
        key = self._acting_keys.get(owner)
        if key is None:
            key = f"{ACTING_KEY_PREFIX}{secrets.token_urlsafe(32)}"
            self._acting[key], self._acting_keys[owner] = owner, key
        return key

    def _owner(self, owner: str) -> Principal:
        principal = self.keyring.owner(owner)
        if principal is None:
            raise Unauthorized("the API key that made this batch was revoked", code="key_revoked")
        return principal

    def charge(self, principal: Principal, tokens: int) -> None:
        if principal.tpm is not None and principal is not ANONYMOUS:
            self.limiter.charge(principal.limit_key, tokens, principal.tpm)

    def admin(self, authorization: str | None, needed: Role) -> Principal:
        token = parse_bearer(authorization)
        principal = self.keyring.lookup(token) if token else None
        return authorize_admin(principal, needed, presented=token is not None)
