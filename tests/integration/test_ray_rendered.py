"""The Ray Serve configs ``turnout deploy render --target ray`` writes run as written on a real Ray cluster.

The user's path, command by command: ``turnout deploy render SPEC --target ray``, ``ray start
--head``, ``serve run --non-blocking -a auto ray/serve_config.yaml``. Two specs, one after the
other on one cluster: the shipped ``tiny-cpu`` example (embedded engine: its ``TurnoutEngine``
deployment holds the int4 model) and a vLLM spec, whose engine runs as its own server: the
rendered ``engine_url`` is edited to point at a fault server standing in for vLLM, as the
README tells users to edit it for a server outside Kubernetes. The only other edit is the HTTP
port (the rendered 8000 may be taken here). The head gets 8 logical CPUs: the rendered config
reserves what a real node would have (4 for the CPU engine, 1 per gateway replica); Ray only
counts them. ~45 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from backends.fault import FaultServer
from serving.launcher import free_port

pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'turnout[ray]'")

REPO = Path(__file__).resolve().parents[2]
SPECS = {
    "embedded": REPO / "deploy" / "examples" / "tiny-cpu.yaml",
    "vllm": REPO / "tests" / "golden" / "render" / "_specs" / "tiny-cpu-vllm.yaml",
}
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
SERVE = [sys.executable, "-m", "ray.serve.scripts"]


class RayHead:
    """``ray start --head --block`` in its own temp folder; stopping it kills every process it started."""

    def __init__(self, tmp: Path) -> None:
        self.env = {**os.environ, "RAY_TMPDIR": str(tmp)}
        self.address = f"127.0.0.1:{free_port()}"
        self.http_port = free_port()  # Serve keeps the port it started on for every later config
        args = ["start", "--head", "--block", "--num-cpus", "8", "--disable-usage-stats"]
        args += ["--include-dashboard", "false", "--port", self.address.split(":")[1]]
        self.proc = subprocess.Popen([*RAY, *args], env=self.env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        self.started: list[psutil.Process] = []

    def serve_run(self, config: Path) -> None:
        command = [*SERVE, "run", "--non-blocking", "-a", self.address, str(config)]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        self.started = _descendants(self.proc.pid)  # before stop: the tree is gone after

    def stop(self) -> list[psutil.Process]:
        """Stop the head; the processes of the cluster still alive (zombies count as gone) after 20 s."""
        processes = [psutil.Process(self.proc.pid), *self.started, *_descendants(self.proc.pid)]
        os.killpg(self.proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(processes, timeout=20)
        for proc in alive:
            proc.kill()
        self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (left := [proc for proc in processes if _alive(proc)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    tmp = Path(tempfile.mkdtemp(prefix="trt-rr-", dir="/tmp"))  # short: Ray's socket paths
    running = RayHead(tmp)
    try:
        yield running
    finally:
        left = running.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, f"Ray processes left: {left}"


def _render(spec: Path, out: Path, **edits: Any) -> tuple[Path, dict[str, Any]]:
    subprocess.run(["turnout", "deploy", "render", str(spec), "--target", "ray", "--out", str(out)],
                   check=True, capture_output=True)  # fmt: skip
    path = out / "ray" / "serve_config.yaml"
    config = yaml.safe_load(path.read_text())
    config["http_options"]["port"] = edits.pop("port")
    config["applications"][0]["args"].update(edits)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, config["applications"][0]


def _serving(url: str, body: dict[str, Any], timeout: float = 120.0) -> httpx.Response:
    """The first 200 to ``body`` (Serve answers 404/503 until the application is running)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
            if reply.status_code == 200:
                return reply
            last = f"{reply.status_code} {reply.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise AssertionError(f"{url} not serving after {timeout}s: {last}")


def _replicas_seen(url: str, body: dict[str, Any], want: int, timeout: float = 60.0) -> set[str]:
    """Gateway replicas that answered ``body``, asking until ``want`` did or ``timeout`` passed.

    ``serve run --non-blocking`` returns before every replica is up: the first answers can all
    come from the one replica that warmed up first.
    """
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        assert len(reply.headers.get_list("x-request-id")) == 1, reply.headers
        seen.add(reply.headers["x-turnout-replica"])
    return seen


def test_the_rendered_embedded_spec_runs_its_engine_deployment(head: RayHead, tmp_path: Path) -> None:
    port = head.http_port
    config, application = _render(SPECS["embedded"], tmp_path, port=port)
    head.serve_run(config)
    url = f"http://127.0.0.1:{port}"
    model = application["args"]["variant"]["model"]["served_name"]
    body = {"model": model, "messages": [{"role": "user", "content": "12+34="}], "max_tokens": 8}
    reply = _serving(url, body)
    assert reply.headers["x-turnout-variant"] == application["args"]["variant_id"]
    assert reply.json()["usage"]["completion_tokens"] >= 1
    assert application["args"]["gateway_replicas"] == 2
    assert len(_replicas_seen(url, body, want=2)) == 2
    streamed = {**body, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=streamed, timeout=30) as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 3


def test_the_rendered_vllm_spec_reaches_its_engine_at_engine_url(head: RayHead, tmp_path: Path) -> None:
    port = head.http_port
    with FaultServer(reply="answer from the engine server", model="turnout-tiny") as engine:
        config, application = _render(SPECS["vllm"], tmp_path, port=port, engine_url=engine.base_url)
        assert {d["name"] for d in application["deployments"]} == {"TurnoutGateway", "TurnoutRateCounter"}
        head.serve_run(config)  # replaces the embedded application: both route "/"
        url = f"http://127.0.0.1:{port}"
        body = {"model": "turnout-tiny", "messages": [{"role": "user", "content": "hi"}]}
        reply = _serving(url, body)
        assert reply.json()["choices"][0]["message"]["content"] == "answer from the engine server"
        assert reply.headers["x-turnout-variant"] == application["args"]["variant_id"]
        assert len(_replicas_seen(url, body, want=2)) == 2
