"""``turnout serve --ray --replicas 2`` on a local Ray cluster: shared routes, shared limits, failures.

One ``turnout serve --ray`` process (the command users run) starts Ray, Serve's proxy, two
gateway replicas, the embedded variant's engine deployment and the shared rate counter; two
fault servers play remote variants ``a`` and ``b``. Each response names its gateway replica
(``x-turnout-replica``). The tests run in file order: the last one stops the process and
checks that no Ray process is left. Ray needs ~15 s and ~1.5 GB to start here.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.fault import FaultServer
from serving.auth import hash_key, key_prefix, new_key
from serving.launcher import Launched, gateway_process
from serving.store import RouteStore
from tests.integration.control_plane import ADMIN_TOKEN, admin, fault_variant, put_route, write_config

ray = pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'turnout[ray]'")

RPM = 30
RAY_PROCESSES = ("raylet", "gcs_server", "ray::")


def _ray_processes() -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines()[1:] if any(name in line for name in RAY_PROCESSES)]


class Cluster:
    def __init__(self, launched: Launched, store_url: str, key: str, stack: ExitStack) -> None:
        self.url, self.pid, self.store_url = launched.url, launched.pid, store_url
        self.key, self.stack = key, stack


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if _ray_processes():
        pytest.skip("another Ray cluster is running on this machine; stop it with `ray stop`")
    folder = tmp_path_factory.mktemp("ray")
    stack = ExitStack()
    a = stack.enter_context(FaultServer(reply="answer from a"))
    b = stack.enter_context(FaultServer(reply="answer from b"))
    variants = {"a": fault_variant(a), "b": fault_variant(b), "tiny": {"kind": "embedded"}}
    routes = {"chat": {"targets": [{"variant": "a"}]}, "tiny": {"targets": [{"variant": "tiny"}]}}
    config = write_config(folder / "gateway.yaml", variants, routes)
    store_url = f"sqlite:///{folder / 'routes.db'}"
    key = new_key("client")
    store = RouteStore(store_url)
    digest, prefix = hash_key(key), key_prefix(key)
    store.add_key(name="limited", role="client", key_hash=digest, prefix=prefix, rpm=RPM, actor="test")
    env = {"TURNOUT_ADMIN_TOKEN": ADMIN_TOKEN}
    launched = stack.enter_context(
        gateway_process(config, timeout=120, env=env, extra_args=("--ray", "--replicas", "2"))
    )
    yield Cluster(launched, store_url, key, stack)
    stack.close()


def _chat(url: str, model: str = "chat", key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    payload = {"model": model, "messages": [{"role": "user", "content": "12+34="}], **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def _answers(url: str, count: int, **kwargs: Any) -> collections.Counter[tuple[str, str]]:
    """(replica, answer) of ``count`` requests sent 8 at a time."""

    def one(_: int) -> tuple[str, str]:
        reply = _chat(url, **kwargs)
        text = reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else reply.text
        return reply.headers.get("x-turnout-replica", "?"), text

    with ThreadPoolExecutor(8) as pool:
        return collections.Counter(pool.map(one, range(count)))


def test_two_gateway_replicas_serve_and_an_ab_flip_reaches_both(cluster: Cluster) -> None:
    before = _answers(cluster.url, 60)
    assert {answer for _, answer in before} == {"answer from a"}
    assert len({replica for replica, _ in before}) == 2, f"both replicas should serve: {before}"
    changed = put_route(cluster.url, "chat", {"targets": [{"variant": "b"}]}, version=1)
    assert changed.status_code == 200, changed.text
    started = time.monotonic()
    while True:
        after = _answers(cluster.url, 40)
        if {answer for _, answer in after} == {"answer from b"} and len({r for r, _ in after}) == 2:
            break
        assert time.monotonic() - started < 2.0, f"not applied by both replicas within 2 s: {after}"
    print(f"A/B flip applied by both replicas within {time.monotonic() - started:.2f}s")
    history = httpx.get(f"{cluster.url}/admin/routes/chat/history", headers=admin()).json()
    assert [v["version"] for v in history["versions"]][-1] == 2


def test_the_embedded_variant_runs_in_its_engine_deployment(cluster: Cluster) -> None:
    reply = _chat(cluster.url, "tiny", max_tokens=5, temperature=0)
    assert reply.status_code == 200 and reply.headers["x-turnout-variant"] == "tiny"
    assert reply.json()["choices"][0]["message"]["content"] == "640"
    body = {"model": "tiny", "prompt": "the", "max_tokens": 8, "stream": True}
    with httpx.stream("POST", f"{cluster.url}/v1/completions", json=body, timeout=30) as stream:
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 3 and events[-1] == "data: [DONE]"
    metrics = httpx.get(f"{cluster.url}/metrics").text
    assert 'turnout_variant_info{accelerator="cpu-x86",engine="onnxruntime-genai",kind="ray_serve"' in metrics


def test_a_key_limit_holds_across_replicas(cluster: Cluster) -> None:
    started = time.monotonic()
    seen = _answers(cluster.url, 2 * RPM, key=cluster.key)
    elapsed = time.monotonic() - started
    admitted = sum(n for (_, answer), n in seen.items() if answer == "answer from b")
    refused = sum(n for (_, answer), n in seen.items() if "rate_limit_exceeded" in answer)
    replicas = {replica for replica, _ in seen}
    print(f"limit {RPM}/min, 2 replicas: {admitted} admitted, {refused} refused in {elapsed:.1f}s")
    assert len(replicas) == 2 and admitted + refused == 2 * RPM
    assert RPM * 0.9 <= admitted <= RPM * 1.05 + elapsed * RPM / 60  # the bucket refills L/60 per s
    metrics = httpx.get(f"{cluster.url}/metrics").text
    assert "turnout_ratelimit_shared_unreachable_total 0.0" in metrics


def test_killing_a_gateway_replica_loses_no_request_that_had_not_started(cluster: Cluster) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="auto", namespace="serve", logging_level="ERROR", log_to_driver=False)
    try:
        actors = ray.util.list_named_actors(all_namespaces=True)
        names = [actor["name"] for actor in actors if "TurnoutGateway" in actor["name"]]
        assert len(names) == 2, names
        victim = ray.get_actor(names[0], namespace="serve")
        results: list[tuple[float, int]] = []

        def steady(_: int) -> None:
            deadline = time.monotonic() + 6.0
            while time.monotonic() < deadline:
                sent = time.monotonic()
                try:
                    status = _chat(cluster.url).status_code
                except httpx.HTTPError:
                    status = 0
                results.append((sent, status))

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(steady, i) for i in range(4)]
            time.sleep(2.0)
            killed_at = time.monotonic()
            ray.kill(victim, no_restart=False)
            for future in futures:
                future.result()
    finally:
        ray.shutdown()
    failed = [(sent, status) for sent, status in results if status != 200]
    after = [status for sent, status in results if sent > killed_at + 0.05]
    print(f"{len(results)} requests while killing a replica; failed: {failed}")
    assert len(after) > 20 and all(status == 200 for status in after)
    assert len(failed) <= 4  # at most those in flight on the killed replica when it died


def test_shutdown_leaves_no_ray_process(cluster: Cluster) -> None:
    os.kill(cluster.pid, signal.SIGTERM)
    cluster.stack.close()
    deadline = time.monotonic() + 30
    while _ray_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ray_processes() == []
    assert Path("/tmp/ray").exists()  # Ray's session logs stay, as with `ray stop`
