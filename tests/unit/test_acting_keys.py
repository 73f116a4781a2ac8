"""The keys a batch's requests come in with (``Access.acting_for``): each acts as the key that
made the batch, with that key's limits as they are when the request runs, and stops acting once
that key is revoked; the anonymous caller's batches carry no key. An acting key acts only inside
``acting_in_process`` (the runner's call of the app): anywhere else, as over HTTP, it is a 401.
No server: the access layer with a key ring built from records."""

from __future__ import annotations

import asyncio

import pytest

from serving.access import Access, acting_in_process
from serving.api.stored_responses import owner_of
from serving.auth import ANONYMOUS, hash_key
from serving.config import AuthSettings
from serving.errors import RateLimited, Unauthorized
from serving.metrics import GatewayMetrics
from serving.store.records import ApiKeyRecord

SECRET = "tk-alice-secret-key-for-tests"


def _record(rpm: int | None = None, revoked_at: float | None = None) -> ApiKeyRecord:
    return ApiKeyRecord(1, "alice", "client", hash_key(SECRET), SECRET[:8], 0.0, revoked_at, rpm, None)


def test_an_acting_key_is_the_batch_owners_key_with_its_limits_of_the_moment() -> None:
    access = Access(AuthSettings(anonymous_clients=False), GatewayMetrics())
    access.reload([_record()])
    alice = asyncio.run(access.client(f"Bearer {SECRET}"))
    acting = access.acting_for(owner_of(alice))
    assert acting is not None and acting != SECRET
    assert access.acting_for(owner_of(alice)) == acting  # one per owner
    with acting_in_process():
        assert asyncio.run(access.client(f"Bearer {acting}")) == alice
        access.reload([_record(rpm=1)])  # the key's limit, changed since the batch was made
        assert asyncio.run(access.client(f"Bearer {acting}")).rpm == 1
        with pytest.raises(RateLimited):  # and spent on the key's own bucket
            asyncio.run(access.client(f"Bearer {SECRET}"))
        access.reload([_record(revoked_at=5.0)])
        with pytest.raises(Unauthorized) as revoked:
            asyncio.run(access.client(f"Bearer {acting}"))
    assert revoked.value.code == "key_revoked"


def test_with_batch_key_limits_off_an_acting_key_leaves_the_keys_limits_to_its_live_requests() -> None:
    access = Access(AuthSettings(anonymous_clients=False), GatewayMetrics(), batch_key_limits=False)
    access.reload([_record(rpm=1)])
    acting = access.acting_for(owner_of(asyncio.run(access.client(f"Bearer {SECRET}"))))  # the 1 rpm
    with acting_in_process():
        for _ in range(3):
            principal = asyncio.run(access.client(f"Bearer {acting}"))
            assert (principal.name, principal.rpm, principal.tpm) == ("alice", None, None)
            access.charge(principal, 1000)  # nothing to charge
        with pytest.raises(RateLimited):  # alice's own requests still have their 1 a minute
            asyncio.run(access.client(f"Bearer {SECRET}"))


@pytest.mark.parametrize("anonymous_clients", [False, True])
def test_an_acting_key_outside_the_runners_requests_is_refused(anonymous_clients: bool) -> None:
    access = Access(AuthSettings(anonymous_clients=anonymous_clients), GatewayMetrics())
    access.reload([_record()])
    acting = access.acting_for(owner_of(asyncio.run(access.client(f"Bearer {SECRET}"))))
    with pytest.raises(Unauthorized):  # as over HTTP, had it leaked: neither alice nor anonymous
        asyncio.run(access.client(f"Bearer {acting}"))
    with pytest.raises(Unauthorized):
        asyncio.run(access.client(None, api_key_header=acting))
    with acting_in_process():  # the same key, in the runner's request: alice
        assert asyncio.run(access.client(f"Bearer {acting}")).name == "alice"


def test_the_anonymous_callers_batches_carry_no_key_and_unknown_keys_act_for_nobody() -> None:
    access = Access(AuthSettings(anonymous_clients=True), GatewayMetrics())
    assert access.acting_for(owner_of(ANONYMOUS)) is None
    assert asyncio.run(access.client(None)) == ANONYMOUS
    # A made-up key of that shape acts for nobody: a key of Turnout's own shape, never anonymous.
    with acting_in_process(), pytest.raises(Unauthorized):
        asyncio.run(access.client("Bearer tb-acting-made-up"))
