"""Every key's batches for an operator: ``/admin/batches`` and ``turnout batches``, on a real gateway.

Two client keys make a batch each in front of a fault upstream (one slow, one quick). A viewer
lists both with the name of the key that made each, filtered by status and paged; a client key
and a viewer cannot cancel; an operator cancels the slow batch with ``turnout batches cancel``,
which stops its request in flight, shows as cancelled to the key that made it, and is in the
audit log under the operator's name. A revoked key's batch lists with no key name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    admin,
    eventually,
    fault_batch,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[Launched, dict[str, str]]]:
    """A gateway serving only known keys, and the keys: alice and bob (clients), a viewer and an
    operator."""
    with FaultServer() as upstream:
        config = write_config(
            tmp_path / "gateway.yaml",
            {"slow": fault_variant(upstream, read_timeout=30.0)},
            {"chat": {"targets": [{"variant": "slow"}]}},
            auth={"anonymous_clients": False},
            batches={"concurrency": 1},
        )
        with running_gateway(config) as launched:
            keys = {}
            roles = {"alice": "client", "bob": "client", "watcher": "viewer", "ops": "operator"}
            for name, role in roles.items():
                wanted = {"name": name, "role": role}
                made = httpx.post(f"{launched.url}/admin/keys", json=wanted, headers=admin())
                assert made.status_code == 201, made.text
                keys[name] = made.json()["key"]
            yield launched, keys


def _batch(gateway: Launched, key: str, faults: list[str]) -> tuple[openai.OpenAI, Any]:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    return client, fault_batch(client, faults)


def _turnout(gateway: Launched, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TURNOUT_URL": gateway.url, "TURNOUT_ADMIN_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "serving.cli", "batches", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_operator_sees_every_keys_batches_and_cancels_one(
    gateway: tuple[Launched, dict[str, str]],
) -> None:
    launched, keys = gateway
    alice, slow = _batch(launched, keys["alice"], ["latency=20000"] * 3)
    bob, quick = _batch(launched, keys["bob"], ["ok"])
    eventually(lambda: bob.batches.retrieve(quick.id).status == "completed", 15)
    in_flight = lambda: metric_value(launched.url, "turnout_requests_in_flight", route="chat")  # noqa: E731
    eventually(lambda: in_flight() == 1, 10)  # alice's first line, which would take 20 s

    def listed(token: str, **params: str) -> httpx.Response:
        return httpx.get(f"{launched.url}/admin/batches", params=params, headers=admin(token))

    every = listed(keys["watcher"])
    assert every.status_code == 200, every.text
    assert [(b["id"], b["key"], b["status"]) for b in every.json()["data"]] == [
        (quick.id, "bob", "completed"),
        (slow.id, "alice", "in_progress"),
    ]
    assert every.json()["data"][0]["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
    assert [b["id"] for b in listed(keys["watcher"], status="in_progress").json()["data"]] == [slow.id]
    first = listed(keys["watcher"], limit="1").json()
    assert [b["id"] for b in first["data"]] == [quick.id] and first["has_more"]
    after = listed(keys["watcher"], limit="1", after=first["last_id"]).json()
    assert [b["id"] for b in after["data"]] == [slow.id] and not after["has_more"]
    wrong = listed(keys["watcher"], status="running")
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "status"
    assert listed(keys["alice"]).status_code == 403  # a client key reads its own, on /v1/batches

    printed = _turnout(launched, keys["watcher"], "list")
    assert printed.returncode == 0, printed.stderr
    rows = printed.stdout.split("\n")
    assert rows[0].split() == ["id", "key", "status", "done/failed/total", "endpoint", "model", "created"]
    assert rows[2].split()[:5] == [quick.id, "bob", "completed", "1/0/1", "/v1/chat/completions"]
    assert rows[3].split()[:4] == [slow.id, "alice", "in_progress", "0/0/3"]

    refused = _turnout(launched, keys["watcher"], "cancel", slow.id)  # a viewer reads only
    assert refused.returncode == 1 and "operator role" in refused.stderr
    cancelled = _turnout(launched, keys["ops"], "cancel", slow.id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{slow.id}: cancelling"
    eventually(lambda: in_flight() == 0, 5)  # hung up, not answered
    eventually(lambda: alice.batches.retrieve(slow.id).status == "cancelled", 10)
    entry = httpx.get(f"{launched.url}/admin/audit", headers=admin(ADMIN_TOKEN)).json()["entries"][0]
    assert (entry["actor"], entry["action"]) == ("ops", "batch-cancel")
    assert entry["detail"] == f"id={slow.id} key=alice"

    missing = httpx.post(f"{launched.url}/admin/batches/batch_nope/cancel", headers=admin(keys["ops"]))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "batch_not_found"
    assert httpx.delete(f"{launched.url}/admin/keys/bob", headers=admin()).status_code == 200
    assert listed(keys["watcher"], status="completed").json()["data"][0]["key"] is None
    assert f"{quick.id}  (revoked)" in _turnout(launched, keys["watcher"], "list").stdout
