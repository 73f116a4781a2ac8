"""Keys over the admin API (``/admin/keys``) on a real gateway: what ``turnout keys`` does on the
store, for an operator who reaches the gateway and not its database (README, Keys and limits)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import openai
import pytest

from serving.launcher import Launched
from tests.integration.control_plane import ADMIN_TOKEN, admin, keyed_gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with keyed_gateway(tmp_path_factory.mktemp("keys")) as (launched, _):
        yield launched


def _keys(gateway: Launched, **body: object) -> httpx.Response:
    return httpx.post(f"{gateway.url}/admin/keys", json=body, headers=admin(), timeout=10)


def test_a_key_made_over_the_api_works_at_once_and_stops_when_revoked(gateway: Launched) -> None:
    made = _keys(gateway, name="app", rpm=600)
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    assert key.startswith("sk-turnout-") and made.json()["rpm"] == 600 and made.json()["role"] == "client"
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    answer = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hello there"  # no poll interval to wait out here

    listed = httpx.get(f"{gateway.url}/admin/keys", headers=admin()).json()["keys"]
    assert [k["name"] for k in listed] == ["app"]
    assert key not in str(listed) and "key_hash" not in listed[0]  # shown once, at creation

    revoked = httpx.delete(f"{gateway.url}/admin/keys/app", headers=admin())
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    again = httpx.delete(f"{gateway.url}/admin/keys/app", headers=admin())
    assert again.status_code == 404 and again.json()["error"]["code"] == "key_not_found"
    every = httpx.get(f"{gateway.url}/admin/keys?all=true", headers=admin()).json()["keys"]
    assert [k["name"] for k in every] == ["app"] and every[0]["revoked_at"] is not None

    audit = httpx.get(f"{gateway.url}/admin/audit?limit=2", headers=admin()).json()["entries"]
    assert [(e["actor"], e["action"]) for e in audit] == [
        ("env-admin", "key-revoke"),
        ("env-admin", "key-create"),
    ]


def test_only_an_admin_manages_keys_and_bad_bodies_say_why(gateway: Launched) -> None:
    operator = _keys(gateway, name="ops-2", role="operator").json()["key"]
    as_operator = httpx.post(
        f"{gateway.url}/admin/keys", json={"name": "x"}, headers=admin(operator), timeout=10
    )
    assert as_operator.status_code == 403, as_operator.text
    assert httpx.get(f"{gateway.url}/admin/keys").status_code == 401
    assert _keys(gateway, name="ops-2").status_code == 409  # the name is taken while it is active
    for body, said in [
        ({"name": "bad name"}, "name: 'bad name' is not a key name"),
        ({"name": "b", "role": "root"}, "role: Input should be 'client', 'viewer', 'operator' or 'admin'"),
        ({"name": "b", "rpm": 0}, "rpm: Input should be greater than or equal to 1"),
        ({"name": "b", "rpm_limit": 5}, "rpm_limit: unknown field; LiteLLM's rpm_limit is 'rpm' here"),
        ({"role": "client"}, "name: Field required"),
    ]:
        refused = _keys(gateway, **body)
        assert refused.status_code == 422 and refused.json()["error"]["message"].startswith(said), (
            refused.text
        )
    broken = httpx.post(f"{gateway.url}/admin/keys", content=b"{", headers=admin(), timeout=10)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"


def test_turnout_keys_with_url_goes_through_the_admin_api(gateway: Launched) -> None:
    def keys(*argv: str, token: str | None = ADMIN_TOKEN) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "TURNOUT_ADMIN_TOKEN"}
        extra = ("--token", token) if token else ()
        command = [sys.executable, "-m", "serving.cli", "keys", *argv, "--url", gateway.url, *extra]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)

    made = keys("create", "cli-app", "--rpm", "7")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("sk-turnout-") and "only time the key is shown" in made.stderr
    answered = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert answered.status_code == 200
    listed = keys("list")
    assert listed.returncode == 0 and "cli-app" in listed.stdout and " 7 " in listed.stdout, listed.stdout
    assert keys("revoke", "cli-app").returncode == 0
    gone = keys("revoke", "cli-app")
    assert gone.returncode == 1 and "404 no active API key named 'cli-app'" in gone.stderr
    anonymous = keys("list", token=None)
    assert anonymous.returncode == 1 and "pass --token" in anonymous.stderr
    env = {k: v for k, v in os.environ.items() if k != "TURNOUT_ADMIN_TOKEN"}
    stray = subprocess.run(  # a token without --url would be ignored by the store: refused
        [sys.executable, "-m", "serving.cli", "keys", "list", "--token", ADMIN_TOKEN, "--store", "sqlite://"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert stray.returncode == 2 and "--token goes with --url" in stray.stderr
