"""``turnout routes …`` end to end: the operator walkthrough, run as a subprocess against a gateway."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE

import httpx
import pytest

from backends.fault import FaultServer
from serving.launcher import Launched
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    admin,
    chat,
    eventually,
    fault_variant,
    running_gateway,
    write_config,
)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Launched]:
    with (
        FaultServer(reply="answer from a") as a,
        FaultServer(reply="answer from b") as b,
        FaultServer(reply="answer from c") as c,
    ):
        variants = {"a": fault_variant(a), "b": fault_variant(b), "c": fault_variant(c)}
        config = write_config(tmp_path / "gateway.yaml", variants, {"chat": {"targets": [{"variant": "a"}]}})
        with running_gateway(config) as launched:
            yield launched


def _command(
    gateway: Launched, *args: str, token: str | None = ADMIN_TOKEN
) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("TURNOUT_URL", "TURNOUT_ADMIN_TOKEN")}
    if token:
        env["TURNOUT_ADMIN_TOKEN"] = token
    return [sys.executable, "-m", "serving.cli", "routes", "--url", gateway.url, *args], env


def routes(
    gateway: Launched, *args: str, token: str | None = ADMIN_TOKEN
) -> subprocess.CompletedProcess[str]:
    cmd, env = _command(gateway, *args, token=token)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


def _current(gateway: Launched) -> dict[str, object]:
    return dict(httpx.get(f"{gateway.url}/admin/routes/chat", headers=admin()).json())


def test_operator_walkthrough(gateway: Launched) -> None:
    flipped = routes(gateway, "weights", "chat", "a=70", "b=30", "--reason", "try b on 30%")
    assert flipped.returncode == 0, flipped.stderr
    assert _current(gateway)["version"] == 2
    listed = routes(gateway, "list")
    assert listed.returncode == 0 and "a 70%" in listed.stdout and "b 30%" in listed.stdout

    shadowed = routes(gateway, "shadow", "chat", "--add", "c", "--rate", "1.0")
    assert shadowed.returncode == 0, shadowed.stderr
    for i in range(6):
        assert chat(gateway.url, key=f"user-{i}").status_code == 200
    shadow_url = f"{gateway.url}/admin/routes/chat/shadow"

    def compared() -> int:  # shadows are compared once both answers are in, after the reply
        return int(httpx.get(shadow_url, headers=admin()).json()["shadows"].get("c", {}).get("compared", 0))

    eventually(lambda: compared() == 6, 5)
    summary = routes(gateway, "shadow", "chat")
    assert summary.returncode == 0 and "answer from c" in summary.stdout

    canary_args = ("canary", "chat", "--canary", "b", "--steps", "10,50,100", "--max-error-rate", "0.05")
    on_a_split = routes(gateway, *canary_args)  # a=70 b=30: the canary would drop that split
    assert on_a_split.returncode == 2 and "`turnout routes weights chat a=1`" in on_a_split.stderr
    assert routes(gateway, "weights", "chat", "a=1").returncode == 0
    canary = routes(gateway, *canary_args)
    assert canary.returncode == 0, canary.stderr
    assert _current(gateway)["spec"]["canary"]["canary"] == "b"  # type: ignore[index]
    assert _current(gateway)["action"] == "canary-start"
    aborted = routes(gateway, "canary", "chat", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert "(canary-abort)" in aborted.stdout
    assert _current(gateway)["spec"]["canary"] is None  # type: ignore[index]
    assert _current(gateway)["action"] == "canary-abort"
    assert routes(gateway, "canary", "chat", "--canary", "b", "--max-error-rate", "0.05").returncode == 0
    promoted = routes(gateway, "canary", "chat", "--promote")
    assert promoted.returncode == 0, promoted.stderr
    current = _current(gateway)
    assert current["spec"]["canary"] is None and current["spec"]["targets"][0]["variant"] == "b"  # type: ignore[index]
    assert current["reason"] == "promote canary b (remaining steps skipped)"
    assert current["action"] == "canary-complete" and current["author"] != "canary-judge"
    audit = httpx.get(f"{gateway.url}/admin/audit?route=chat&limit=4", headers=admin()).json()["entries"]
    assert [e["action"] for e in audit] == ["canary-complete", "canary-start", "canary-abort", "canary-start"]
    printed = routes(gateway, "audit", "--route", "chat", "--limit", "4")
    assert printed.returncode == 0, printed.stderr
    rows = printed.stdout.splitlines()[2:]
    assert [row.split()[3] for row in rows] == [e["action"] for e in audit]
    assert "promote canary b (remaining steps skipped)" in rows[0]
    assert "no audit entries for route 'nope'" in routes(gateway, "audit", "--route", "nope").stdout

    history = routes(gateway, "history", "chat")
    assert history.returncode == 0 and "try b on 30%" in history.stdout
    diff = routes(gateway, "diff", "chat", "1", "2")
    assert diff.returncode == 0 and '"weight": 70' in diff.stdout and diff.stdout.count("\n-") >= 1

    back = routes(gateway, "rollback", "chat", "--to", "1", "--reason", "back to a only")
    assert back.returncode == 0, back.stderr
    current = _current(gateway)
    assert current["action"] == "rollback" and current["spec"]["targets"] == [  # type: ignore[index]
        {"variant": "a", "weight": 1.0}
    ]
    assert chat(gateway.url, key="user-1").headers["x-turnout-variant"] == "a"


def test_two_rollbacks_at_once_do_not_undo_each_other(gateway: Launched, tmp_path: Path) -> None:
    """Two operators roll back the same bad version together: one wins, the other is refused."""
    spec_file = tmp_path / "spec.yaml"
    for variant in ("a", "c"):  # v1 good (a), v2 bad (c)
        spec_file.write_text(f"targets: [{{variant: {variant}}}]\n")
        assert routes(gateway, "set", "twice", "--file", str(spec_file)).returncode == 0
    cmd, env = _command(gateway, "rollback", "twice")
    both = [subprocess.Popen(cmd, env=env, stdout=PIPE, stderr=PIPE, text=True) for _ in range(2)]
    outcomes = sorted((p.wait(timeout=60), p.communicate()[1]) for p in both)
    assert [code for code, _ in outcomes] == [0, 1], outcomes
    assert "409" in outcomes[1][1], outcomes  # a stale If-Match, or "already a rollback"
    history = httpx.get(f"{gateway.url}/admin/routes/twice/history", headers=admin()).json()["versions"]
    assert [v["action"] for v in history] == ["set", "set", "rollback"]
    assert chat(gateway.url, "twice").headers["x-turnout-variant"] == "a"
    again = routes(gateway, "rollback", "twice")  # after the fact too: a rollback is not undone
    assert again.returncode == 1 and "itself a rollback" in again.stderr and "--to N" in again.stderr
    assert "re-run the command" not in again.stderr  # that hint is for a stale If-Match only
    assert routes(gateway, "rollback", "twice", "--to", "2").returncode == 0  # asked for by name


def test_set_from_a_file_creates_and_replaces_routes(gateway: Launched, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("targets: [{variant: b}]\nfallbacks: [a]\n")
    created = routes(gateway, "set", "chat-b", "--file", str(spec_file), "--reason", "new route")
    assert created.returncode == 0, created.stderr
    assert chat(gateway.url, "chat-b").headers["x-turnout-variant"] == "b"
    spec_file.write_text("targets: [{variant: c}]\n")
    replaced = routes(gateway, "set", "chat-b", "--file", str(spec_file), "--if-match", "1")
    assert replaced.returncode == 0, replaced.stderr
    stale = routes(gateway, "set", "chat-b", "--file", str(spec_file), "--if-match", "1")
    assert stale.returncode == 1 and "409" in stale.stderr
    assert chat(gateway.url, "chat-b").headers["x-turnout-variant"] == "c"


def test_errors_exit_non_zero_with_the_reason(gateway: Launched) -> None:
    unknown = routes(gateway, "weights", "chat", "a=50", "nope=50")
    assert unknown.returncode == 1 and "unknown variant 'nope'" in unknown.stderr
    no_token = routes(gateway, "show", "chat", token=None)
    assert no_token.returncode == 1 and "401" in no_token.stderr
    local = routes(gateway, "weights", "chat", "a=-5")
    assert local.returncode == 2
    assert _current(gateway)["version"] == 1


def test_a_route_named_like_a_hub_model_is_managed_like_any_other(gateway: Launched, tmp_path: Path) -> None:
    """``org/model`` names (the usual ones) were served but every admin path was a 404."""
    name = "meta-llama/Llama-3.1-8B-Instruct"
    spec = tmp_path / "a.yaml"
    spec.write_text("targets: [{variant: a}]\n")
    made = routes(gateway, "set", name, "--file", str(spec))
    assert made.returncode == 0, made.stderr
    assert routes(gateway, "weights", name, "a=1", "b=1").returncode == 0
    shown = httpx.get(f"{gateway.url}/admin/routes/{name}", headers=admin()).json()
    assert shown["route"] == name and shown["version"] == 2
    assert routes(gateway, "rollback", name).returncode == 0
    history = routes(gateway, "history", name)
    assert history.returncode == 0 and "rollback" in history.stdout, history.stdout
    assert chat(gateway.url, model=name).headers["x-turnout-route-version"] == "3"
    odd = routes(gateway, "set", "a?b#c d%", "--file", str(spec))  # percent-encoded on the way
    assert odd.returncode == 0, odd.stderr
    encoded = httpx.get(f"{gateway.url}/admin/routes/a%3Fb%23c%20d%25", headers=admin())
    assert encoded.json()["route"] == "a?b#c d%"
    body = {"spec": {"targets": [{"variant": "a"}]}}
    for bad in ("x/history", "a%09b", "%20padded", "a//b"):
        refused = httpx.put(f"{gateway.url}/admin/routes/{bad}", json=body, headers=admin())
        assert refused.status_code == 422 and refused.json()["error"]["param"] == "name", (bad, refused.text)
