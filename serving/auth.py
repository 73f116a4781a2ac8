"""API keys and admin tokens: who is calling, and may they do this.

Sits at the API edge, first thing after a request is parsed: the client API
(``/v1/*``) turns its ``Authorization`` header into a :class:`Principal` with
:func:`authorize_client` (then ``serving.ratelimit`` applies the key's limits); the
admin API (``/admin/*``) does the same with :func:`authorize_admin` and a needed role.
Keys are stored only as SHA-256 hashes (``serving.store``); :class:`KeyRing` is the
in-memory index the gateway rebuilds when the stored keys change. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, get_args

from serving.errors import Forbidden, Unauthorized

Role = Literal["client", "viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)

# Rank for the admin API: viewer < operator < admin. "client" keys may use only the client API.
_ADMIN_RANK: dict[str, int] = {"client": 0, "viewer": 1, "operator": 2, "admin": 3}

CLIENT_KEY_PREFIX = "sk-turnout-"
ADMIN_TOKEN_PREFIX = "tadm-"
ACTING_KEY_PREFIX = "tb-acting-"  # a batch request's in-process key (serving.access), never issued
PREFIX_CHARS = 14


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a key's name and role, and its per-minute limits (None = unlimited)."""

    name: str
    role: Role
    rpm: int | None = None
    tpm: int | None = None
    # Whose token buckets it draws on: this key's own (from its hash), not its name's, which a key
    # created after one is revoked may take again and would inherit an emptied bucket with.
    bucket: str = field(default="", compare=False)

    @property
    def limit_key(self) -> str:
        return self.bucket or self.name


ANONYMOUS = Principal(name="anonymous", role="client")


class KeyLike(Protocol):
    """What :class:`KeyRing` reads from a stored key (``serving.store.ApiKeyRecord`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def key_hash(self) -> str: ...
    @property
    def revoked_at(self) -> Any: ...
    @property
    def rpm(self) -> int | None: ...
    @property
    def tpm(self) -> int | None: ...


def new_key(role: Role) -> str:
    """A fresh secret: ``sk-turnout-…`` for client keys, ``tadm-…`` for admin-API roles."""
    prefix = CLIENT_KEY_PREFIX if role == "client" else ADMIN_TOKEN_PREFIX
    return prefix + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The SHA-256 hex digest stored in place of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_prefix(key: str) -> str:
    """The first characters of a key, safe to display so people can tell keys apart."""
    return key[:PREFIX_CHARS]


def bearer_token(authorization: str | None) -> str | None:
    """``"Bearer X"`` (scheme in any case) → ``"X"``; anything else → None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def other_credentials(authorization: str | None) -> list[str]:
    """What an Authorization header that is not ``Bearer`` carries: a bare value, another
    scheme's token, and for ``Basic`` the decoded user and password (``curl -u :KEY``)."""
    parts = authorization.split() if authorization else []
    if not parts:
        return []
    found = [parts[-1]]
    if len(parts) == 2 and parts[0].lower() == "basic":
        try:
            padded = parts[1] + "=" * (-len(parts[1]) % 4)  # some clients leave the padding off
            decoded = base64.b64decode(padded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return found
        user, _, password = decoded.partition(":")
        found += [user, password]
    return found


def is_role(value: str) -> bool:
    return value in _ADMIN_RANK


class KeyRing:
    """In-memory index of active keys (rebuilt by the gateway when the store changes)."""

    def __init__(self, records: Iterable[KeyLike], *, bootstrap_admin_token: str | None = None) -> None:
        # hash → (the stored hash, its principal): the lookup ends with a constant-time compare.
        self._by_hash: dict[str, tuple[str, Principal]] = {}
        self._by_owner: dict[str, Principal] = {}  # by limit_key: whose stored things are whose
        refused: set[str] = set()
        for record in records:
            if record.revoked_at is not None or not is_role(record.role):
                refused.add(record.key_hash)
                continue
            role = cast(Role, record.role)
            principal = Principal(record.name, role, record.rpm, record.tpm, bucket=record.key_hash[:16])
            self._by_hash[record.key_hash] = (record.key_hash, principal)
        if bootstrap_admin_token:
            # The environment's token is an admin with no name, unless it is also a stored key
            # (`turnout keys create ops`, then exported for `turnout routes`): then it acts as
            # that key, its name in the audit log, and revoking the key refuses it too.
            digest = hash_key(bootstrap_admin_token)
            if digest not in self._by_hash and digest not in refused:
                self._by_hash[digest] = (digest, Principal("env-admin", "admin"))
        self._by_owner = {principal.limit_key: principal for _, principal in self._by_hash.values()}

    def __len__(self) -> int:
        return len(self._by_hash)

    def owner(self, limit_key: str) -> Principal | None:
        """The key in force whose ``limit_key`` this is (None: revoked, or never a key)."""
        return self._by_owner.get(limit_key)

    def lookup(self, key: str | None) -> Principal | None:
        """The principal for a presented key, or None when it is missing, unknown or revoked."""
        if not key or not self._by_hash:  # no keys at all: nothing to hash the key for
            return None
        digest = hash_key(key)
        found = self._by_hash.get(digest)
        if found is None:
            return None
        # The index is keyed by the hash, never the secret; confirm it in constant time all the same.
        stored, principal = found
        return principal if hmac.compare_digest(stored, digest) else None


def authorize_admin(principal: Principal | None, needed: Role, *, presented: bool = False) -> Principal:
    """The caller if its role reaches ``needed`` on the admin API; otherwise 401 or 403.

    ``presented`` says whether a token came with the request, so a wrong token and a
    missing one get different codes (``invalid_admin_token`` / ``missing_admin_token``).
    """
    if principal is None:
        if presented:
            raise Unauthorized("invalid admin token", code="invalid_admin_token")
        raise Unauthorized("admin API needs a bearer token", code="missing_admin_token")
    if principal.role == "client":
        raise Forbidden("a client API key cannot use the admin API")
    if _ADMIN_RANK[principal.role] < _ADMIN_RANK[needed]:
        raise Forbidden(f"this needs the {needed} role; '{principal.name}' has the {principal.role} role")
    return principal


def looks_issued(key: str | None) -> bool:
    """Whether a presented key has the shape of one Turnout makes (``sk-turnout-…``, ``tadm-…``, a
    batch request's ``tb-acting-…``): unknown, it is a typo, a revoked key or one that has no
    business on the network, a 401 even where anonymous clients are served (any other string, e.g.
    the openai SDK's required ``api_key="anything"``, is taken as anonymous)."""
    return key is not None and key.startswith((CLIENT_KEY_PREFIX, ADMIN_TOKEN_PREFIX, ACTING_KEY_PREFIX))


def authorize_client(
    principal: Principal | None,
    *,
    anonymous_allowed: bool,
    presented: bool,
    authorization: str | None = None,
    issued_shape: bool = False,
) -> Principal:
    """The caller on the client API: its key's principal, else anonymous when allowed, else 401.

    ``authorization`` is the raw header, so a key sent with another scheme (``Basic …``) is told
    which one to use rather than that there was none. ``issued_shape``: the unknown key looks
    like one Turnout issued (:func:`looks_issued`), so it is refused even when anonymous clients
    are served."""
    if principal is not None:
        return principal
    if anonymous_allowed and not issued_shape:
        return ANONYMOUS
    if presented:
        raise Unauthorized("Incorrect API key provided", code="invalid_api_key")
    how = "send it as 'Authorization: Bearer <key>' (or in an 'api-key' header)"
    scheme = authorization.strip().partition(" ")[0] if authorization and authorization.strip() else None
    if scheme and looks_issued(scheme):  # the key itself, with no scheme before it
        raise Unauthorized(
            f"The Authorization header holds a key without its scheme; {how}", code="invalid_api_key"
        )
    if scheme and scheme.lower() != "bearer":
        raise Unauthorized(
            f"You didn't provide an API key: the Authorization header's scheme is '{scheme[:20]}', "
            f"not Bearer; {how}",
            code="invalid_api_key",
        )
    raise Unauthorized(f"You didn't provide an API key; {how}", code="invalid_api_key")
