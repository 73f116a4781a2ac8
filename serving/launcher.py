"""Start real Turnout gateway processes on 127.0.0.1, with bounded waits.

Used by tests, benchmarks and load tests. Each server is a ``turnout serve`` subprocess
(the same command users run), killed by PID at the end; its log is kept in a temp file
and shown if it fails to start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s")


@dataclass(frozen=True, slots=True)
class Launched:
    url: str  # http://127.0.0.1:PORT
    pid: int
    log: Path | None = None  # its output so far (removed when the block ends)


@contextmanager
def gateway_process(
    config: Path | None = None,
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    cpus: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[Launched]:
    """Run ``turnout serve`` (pinned to ``cpus`` with taskset if given) until the block ends.

    ``extra_args`` go to ``turnout serve`` (e.g. ``--ray --replicas 2``)."""
    port = free_port()
    cmd = [sys.executable, "-m", "serving.cli", "serve", "--port", str(port), "--log-level", "warning"]
    cmd += list(extra_args)
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    if config is not None:
        cmd += ["--config", str(config)]
    with tempfile.NamedTemporaryFile(prefix="turnout-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(f"{base}/ready", proc, timeout)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}; log:\n{log_path.read_text()[-4000:]}") from None
        yield Launched(url=base, pid=proc.pid, log=log_path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log_path.unlink(missing_ok=True)
