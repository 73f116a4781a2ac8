"""Client keys and per-key limits on a real gateway, keys managed with the ``turnout keys`` CLI.

The gateway refuses anonymous clients here; keys are created and revoked by running the
CLI against the gateway's store, as an operator would.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from serving.store import RouteStore
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    admin,
    chat,
    eventually,
    fault_variant,
    keyed_gateway,
    running_gateway,
    write_config,
)


def turnout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serving.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, Path]]:
    with keyed_gateway(tmp_path_factory.mktemp("auth")) as found:
        yield found


def _create(config: Path, name: str, *extra: str) -> str:
    made = turnout("keys", "create", name, "--config", str(config), *extra)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith(("sk-turnout-", "tadm-")) and "only" in made.stderr
    return key


def _live(gateway: Launched, config: Path, name: str, *extra: str) -> str:
    """A key created and answering (200) on the gateway: one request spent."""
    key = _create(config, name, *extra)
    eventually(lambda: _with_key(gateway.url, key).status_code == 200, timeout=2)
    return key


def _with_key(base: str, key: str | None, **body: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    payload = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(f"{base}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def test_without_a_known_key_clients_get_401(setup: tuple[Launched, Path]) -> None:
    gateway, _ = setup
    missing = chat(gateway.url)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="turnout"'
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert _with_key(gateway.url, "sk-turnout-made-up").status_code == 401
    assert httpx.get(f"{gateway.url}/v1/models").status_code == 401


def test_a_created_key_works_with_the_openai_client_and_stops_when_revoked(
    setup: tuple[Launched, Path],
) -> None:
    gateway, config = setup
    key = _create(config, "app")
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    eventually(lambda: _with_key(gateway.url, key).status_code == 200, timeout=2)
    answer = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello there"
    assert [m.id for m in client.models.list()] == ["chat"]
    stored = RouteStore(f"sqlite:///{config.parent / 'routes.db'}")
    records = stored.keys()
    assert key not in str([k.as_dict() for k in records])  # only the hash is kept
    assert all(k.key_hash != key for k in records)
    stored.close()
    listed = turnout("keys", "list", "--config", str(config))
    assert "app" in listed.stdout and key not in listed.stdout
    assert turnout("keys", "revoke", "app", "--config", str(config)).returncode == 0
    eventually(lambda: _with_key(gateway.url, key).status_code == 401, timeout=2)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])


def test_requests_per_minute_answer_429_with_retry_after(setup: tuple[Launched, Path]) -> None:
    gateway, config = setup
    key = _live(gateway, config, "limited", "--rpm", "3")
    statuses = [_with_key(gateway.url, key).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]  # 3 per minute: the one in eventually() was the first
    refused = _with_key(gateway.url, key)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    _live(gateway, config, "unlimited")


def test_a_key_made_again_under_a_revoked_ones_name_starts_with_a_full_bucket(
    setup: tuple[Launched, Path],
) -> None:
    gateway, config = setup
    first = _live(gateway, config, "reborn", "--rpm", "2")
    assert [_with_key(gateway.url, first).status_code for _ in range(2)] == [200, 429]
    assert turnout("keys", "revoke", "reborn", "--config", str(config)).returncode == 0
    second = _create(config, "reborn", "--rpm", "2")
    eventually(lambda: _with_key(gateway.url, second).status_code != 401, timeout=2)
    # The eventually() above spent one of its two; the bucket was its own, not the revoked key's.
    assert _with_key(gateway.url, second).status_code == 200


def test_tokens_per_minute_are_charged_after_each_answer(setup: tuple[Launched, Path]) -> None:
    gateway, config = setup
    key = _create(config, "token-limited", "--tpm", "20")
    eventually(lambda: _with_key(gateway.url, key).status_code in (200, 429), timeout=2)
    statuses = [_with_key(gateway.url, key, stream=i % 2 == 1).status_code for i in range(6)]
    assert statuses[-1] == 429 and 429 in statuses


def test_embeddings_are_charged_their_prompt_tokens(setup: tuple[Launched, Path]) -> None:
    """The fault upstream counts a sixteenth of the body's bytes as prompt tokens: 4 here."""
    gateway, config = setup
    key = _create(config, "embedding-limited", "--tpm", "10")
    headers = {"authorization": f"Bearer {key}"}

    def embed() -> int:
        body = {"model": "chat", "input": "a short text", "encoding_format": "float"}
        return httpx.post(f"{gateway.url}/v1/embeddings", json=body, headers=headers, timeout=30).status_code

    eventually(lambda: embed() in (200, 429), timeout=2)
    statuses = [embed() for _ in range(4)]
    assert statuses[-1] == 429 and statuses.count(200) <= 2  # 10 tokens a minute: at most 3 in all


def test_a_stream_that_ends_early_is_charged_what_it_delivered(setup: tuple[Launched, Path]) -> None:
    """An upstream cut (no usage ever comes) costs its chunks; so does a client hanging up."""
    gateway, config = setup
    models, chats = f"{gateway.url}/v1/models", f"{gateway.url}/v1/chat/completions"
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for name, how in (("cut-short", "cut"), ("hung-up", "leave")):
        headers = {"authorization": f"Bearer {_create(config, name, '--tpm', '6')}"}
        eventually(lambda h=headers: httpx.get(models, headers=h).status_code == 200, timeout=2)  # free
        if how == "cut":
            reply = httpx.post(chats, json={**body, "x_fault": "cut=7"}, headers=headers, timeout=30)
            assert reply.status_code == 200 and '"error"' in reply.text  # 7 chunks, then the cut
        else:
            slow = {**body, "x_fault": "slow_chunks=100"}
            with httpx.stream("POST", chats, json=slow, headers=headers, timeout=30) as reply:
                lines = reply.iter_lines()
                for _ in range(16):  # the role chunk, then seven content chunks (blank lines between)
                    next(lines)
        time.sleep(0.5)  # the gateway notices the hang-up
        after = httpx.post(chats, json={**body, "stream": False}, headers=headers, timeout=30)
        assert after.status_code == 429, after.text  # the very next request: 7 tokens > 6 a minute


def test_a_client_key_cannot_use_the_admin_api(setup: tuple[Launched, Path]) -> None:
    gateway, config = setup
    key = _create(config, "client-only")
    admin_token = _create(config, "ops", "--role", "operator")
    url = f"{gateway.url}/admin/routes"
    eventually(lambda: httpx.get(url, headers=admin(admin_token)).status_code == 200, timeout=2)
    assert httpx.get(url, headers=admin(key)).status_code == 403
    wrong = httpx.get(url, headers=admin("tadm-nope"))
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_admin_token"


def test_admin_tokens_also_call_the_client_api_and_basic_auth_is_told_to_use_bearer(
    setup: tuple[Launched, Path],
) -> None:
    """As LiteLLM's master key does (README, Keys and limits)."""
    gateway, config = setup
    _live(gateway, config, "dashboards", "--role", "viewer")
    assert _with_key(gateway.url, ADMIN_TOKEN).status_code == 200  # the environment's admin token
    basic = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": "Basic dXNlcjpwYXNz"},
        timeout=30,
    )
    assert basic.status_code == 401
    assert "scheme is 'Basic', not Bearer" in basic.json()["error"]["message"]


def test_an_environment_admin_token_that_is_a_stored_key_acts_as_that_key(tmp_path: Path) -> None:
    """README, Operating routes: `turnout keys create ops --role admin`, the token exported as
    TURNOUT_ADMIN_TOKEN, then `turnout serve` in that shell: changes are ops's, and revoking ops
    refuses the token, which the gateway would otherwise take as its nameless env-admin."""
    with FaultServer(reply="hello there") as upstream:
        config = write_config(
            tmp_path / "gateway.yaml",
            {"a": fault_variant(upstream), "b": fault_variant(upstream)},
            {"chat": {"targets": [{"variant": "a"}]}},
        )
        token = _create(config, "ops", "--role", "admin")
        with running_gateway(config, env={"TURNOUT_ADMIN_TOKEN": token}) as gateway:
            spec = {"targets": [{"variant": "b"}]}
            put = httpx.put(f"{gateway.url}/admin/routes/chat", json={"spec": spec}, headers=admin(token))
            assert put.status_code == 200, put.text
            assert put.json()["author"] == "ops"
            entries = httpx.get(f"{gateway.url}/admin/audit?limit=1", headers=admin(token)).json()["entries"]
            assert entries[0]["actor"] == "ops"
            assert turnout("keys", "revoke", "ops", "--config", str(config)).returncode == 0
            eventually(
                lambda: httpx.get(f"{gateway.url}/admin/routes", headers=admin(token)).status_code == 401, 2
            )
