"""``turnout serve`` as a user runs it: a bad config stops it at start with a clear message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_invalid_config_fails_at_start(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "variants:\n  a: {kind: embedded, precision: fp64}\nroutes:\n  a: {targets: [{variant: a}]}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert str(config) in done.stderr
    assert "variants.a.precision" in done.stderr
    assert "fp32" in done.stderr  # the reason lists what is allowed


def test_help_lists_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "serve" in done.stdout and "model" in done.stdout


def test_a_port_out_of_range_is_a_usage_error() -> None:
    for command in (["serve", "--port", "99999"], ["backends", "up", "triton", "--grpc-port", "-1"]):
        done = subprocess.run(
            [sys.executable, "-m", "serving.cli", *command], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert f"argument {command[-2]}: port {command[-1]} is outside 0-65535" in done.stderr


def test_a_binary_config_is_named_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\xff")
    done = subprocess.run(
        [sys.executable, "-m", "serving.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{config}: not a text file" in done.stderr


def test_replica_counts_and_a_taken_port_are_refused_before_anything_starts() -> None:
    import socket

    def serve(*options: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "serving.cli", "serve", *options]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    without_ray = serve("--replicas", "2", "--port", "0")
    assert without_ray.returncode == 2 and "--replicas needs --ray" in without_ray.stderr
    zero = serve("--ray", "--replicas", "0", "--port", "0")  # once silently 1
    assert zero.returncode == 2 and "--replicas must be at least 1" in zero.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        taken = serve("--ray", "--port", port)  # once a 40-line traceback from inside Ray
        assert taken.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in taken.stderr
        assert "Traceback" not in taken.stderr
        plain = serve("--port", port)  # once uvicorn's bind error, exit 3, after start-up ran
        assert plain.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in plain.stderr
        assert "Application startup" not in plain.stderr


def test_a_store_that_cannot_be_opened_and_a_bad_log_level_are_messages_not_tracebacks(
    tmp_path: Path,
) -> None:
    def turnout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        import os

        return subprocess.run([sys.executable, "-m", "serving.cli", *args], capture_output=True, text=True,
                              timeout=60, env={**os.environ, **(env or {})})  # fmt: skip

    for store in ("garbage", "mysqlx://x/y", "sqlite:////proc/turnout-test/x.db"):
        keys = turnout("keys", "list", "--store", store)
        assert keys.returncode == 2 and "Traceback" not in keys.stderr, keys.stderr
        assert "cannot open the store" in keys.stderr
    served = turnout("serve", "--port", "0", env={"TURNOUT_STORE_URL": "sqlite:////proc/turnout-test/x.db"})
    assert served.returncode == 2 and "Traceback" not in served.stderr, served.stderr[-2000:]
    assert "store.url sqlite:////proc/turnout-test/x.db: cannot open the store" in served.stderr
    loud = turnout("serve", "--log-level", "loud")
    assert loud.returncode == 2 and "argument --log-level: invalid choice: 'loud'" in loud.stderr
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "server: {log_level: loud}\nvariants: {a: {kind: embedded}}\nroutes: {a: {targets: [{variant: a}]}}\n"
    )
    in_file = turnout("serve", "--config", str(config))
    assert in_file.returncode == 2 and "server.log_level: Input should be 'critical'" in in_file.stderr
