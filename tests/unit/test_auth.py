"""API keys and admin tokens: key format, hashing, the key ring, and the role checks at the edge."""

from __future__ import annotations

from base64 import b64encode
from dataclasses import dataclass

import pytest

from serving.auth import (
    ANONYMOUS,
    KeyRing,
    Principal,
    authorize_admin,
    authorize_client,
    bearer_token,
    hash_key,
    key_prefix,
    looks_issued,
    new_key,
    other_credentials,
)
from serving.errors import Forbidden, Overloaded, Unauthorized


@dataclass(frozen=True)
class Record:
    name: str
    role: str
    key_hash: str
    revoked_at: float | None = None
    rpm: int | None = None
    tpm: int | None = None


def test_new_keys_have_the_role_prefix_and_differ() -> None:
    client = new_key("client")
    assert client.startswith("sk-turnout-") and len(client) > 40
    assert new_key("admin").startswith("tadm-")
    assert new_key("viewer").startswith("tadm-") and new_key("operator").startswith("tadm-")
    assert len({new_key("client") for _ in range(50)}) == 50


def test_hash_and_prefix() -> None:
    key = "sk-turnout-abcdefghijklmnop"
    assert hash_key(key) == hash_key(key)
    assert len(hash_key(key)) == 64 and int(hash_key(key), 16) >= 0
    assert hash_key(key) != hash_key(key + "x")
    assert key_prefix(key) == "sk-turnout-abc"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic abc", None),
        ("abc", None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_key_ring_finds_active_keys_and_skips_revoked() -> None:
    alice, bob = new_key("client"), new_key("client")
    ring = KeyRing(
        [
            Record("alice", "client", hash_key(alice), rpm=60, tpm=1000),
            Record("bob", "client", hash_key(bob), revoked_at=1.0),
        ]
    )
    assert ring.lookup(alice) == Principal("alice", "client", 60, 1000)
    assert ring.lookup(bob) is None
    assert ring.lookup("sk-turnout-unknown") is None
    assert ring.lookup(None) is None and ring.lookup("") is None
    assert ring.lookup(hash_key(alice)) is None  # the stored hash is not itself a key


def test_bootstrap_admin_token() -> None:
    ring = KeyRing([], bootstrap_admin_token="s3cret")
    assert ring.lookup("s3cret") == Principal("env-admin", "admin")
    assert KeyRing([], bootstrap_admin_token="").lookup("") is None
    assert len(KeyRing([], bootstrap_admin_token=None)) == 0


def test_bootstrap_token_that_is_a_stored_key_acts_as_that_key() -> None:
    # README: `turnout keys create ops --role admin`, then `export TURNOUT_ADMIN_TOKEN=tadm-…`
    # before `turnout serve`: the audit log names ops, and revoking ops refuses the token.
    token = "tadm-ops-token"
    ring = KeyRing([Record("ops", "admin", hash_key(token))], bootstrap_admin_token=token)
    principal = ring.lookup(token)
    assert principal is not None and principal.name == "ops" and principal.role == "admin"
    viewer = KeyRing([Record("watch", "viewer", hash_key(token))], bootstrap_admin_token=token)
    assert viewer.lookup(token) == Principal("watch", "viewer", bucket=hash_key(token)[:16])
    revoked = KeyRing([Record("ops", "admin", hash_key(token), revoked_at=1.0)], bootstrap_admin_token=token)
    assert revoked.lookup(token) is None


def test_admin_roles_are_ordered() -> None:
    viewer, operator, admin = (Principal(r, r) for r in ("viewer", "operator", "admin"))  # type: ignore[arg-type]
    assert authorize_admin(viewer, "viewer") is viewer
    assert authorize_admin(admin, "operator") is admin
    assert authorize_admin(operator, "operator") is operator
    with pytest.raises(Forbidden) as refused:
        authorize_admin(viewer, "operator")
    assert refused.value.status == 403
    assert "operator" in refused.value.message and "viewer" in refused.value.message
    with pytest.raises(Forbidden):
        authorize_admin(operator, "admin")


def test_client_keys_cannot_use_the_admin_api() -> None:
    with pytest.raises(Forbidden, match="client API key"):
        authorize_admin(Principal("app", "client"), "viewer")


def test_admin_api_without_or_with_a_wrong_token() -> None:
    with pytest.raises(Unauthorized) as missing:
        authorize_admin(None, "viewer")
    assert missing.value.status == 401 and missing.value.code == "missing_admin_token"
    with pytest.raises(Unauthorized) as wrong:
        authorize_admin(None, "viewer", presented=True)
    assert wrong.value.code == "invalid_admin_token"


def test_client_api() -> None:
    alice = Principal("alice", "client")
    assert authorize_client(alice, anonymous_allowed=False, presented=True) is alice
    assert authorize_client(None, anonymous_allowed=True, presented=False) is ANONYMOUS
    assert authorize_client(None, anonymous_allowed=True, presented=True) is ANONYMOUS  # api_key="anything"
    with pytest.raises(Unauthorized, match="Incorrect API key"):  # a mistyped or revoked key of ours
        authorize_client(None, anonymous_allowed=True, presented=True, issued_shape=True)
    assert looks_issued("sk-turnout-abc") and looks_issued("tadm-x") and not looks_issued("anything")
    with pytest.raises(Unauthorized, match="Incorrect API key") as wrong:
        authorize_client(None, anonymous_allowed=False, presented=True)
    assert wrong.value.code == "invalid_api_key" and wrong.value.status == 401
    with pytest.raises(Unauthorized, match="didn't provide an API key; send it as 'Authorization: Bearer"):
        authorize_client(None, anonymous_allowed=False, presented=False)
    with pytest.raises(Unauthorized, match="scheme is 'Basic', not Bearer") as basic:
        authorize_client(None, anonymous_allowed=False, presented=False, authorization="Basic dTpw")
    assert basic.value.code == "invalid_api_key" and basic.value.status == 401
    with pytest.raises(Unauthorized, match="didn't provide an API key; send"):  # "Bearer" and nothing else
        authorize_client(None, anonymous_allowed=False, presented=False, authorization="Bearer ")


def test_retry_after_rounds_up_so_waiting_it_out_finds_room() -> None:
    assert [Overloaded("full", retry_after=s).headers["retry-after"] for s in (0.2, 1.0, 18.4, 18.6)] == [
        "1", "1", "19", "19",
    ]  # fmt: skip


def test_each_key_draws_on_its_own_bucket_not_its_names() -> None:
    """A key created under a revoked key's name must not inherit that key's emptied bucket."""

    @dataclass
    class Record:
        name: str
        role: str
        key_hash: str
        revoked_at: object = None
        rpm: int | None = 2
        tpm: int | None = None

    old, new = hash_key("sk-turnout-old"), hash_key("sk-turnout-new")
    ring = KeyRing([Record("app", "client", old, revoked_at=1), Record("app", "client", new)])
    assert ring.lookup("sk-turnout-old") is None
    principal = ring.lookup("sk-turnout-new")
    assert principal is not None and principal.name == "app" and principal.limit_key == new[:16]


def test_other_credentials_decode_basic_as_clients_send_it() -> None:
    assert other_credentials(None) == [] and other_credentials("  ") == []
    assert other_credentials("sk-turnout-x") == ["sk-turnout-x"]
    assert other_credentials("Token sk-turnout-x") == ["sk-turnout-x"]
    basic = "Basic " + b64encode(b"user:sk-turnout-x").decode()
    assert other_credentials(basic)[1:] == ["user", "sk-turnout-x"]
    assert other_credentials("Basic not*base64") == ["not*base64"]
    unpadded = "Basic " + b64encode(b":sk-turnout-abcd").decode().rstrip("=")
    assert other_credentials(unpadded)[1:] == ["", "sk-turnout-abcd"]
