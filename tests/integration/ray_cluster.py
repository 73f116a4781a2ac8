"""A ``turnout serve --ray --replicas 2`` cluster for ``test_ray_serve.py``, and how its tests talk to it.

One ``turnout serve --ray`` process (the command users run) starts Ray, Serve's proxy, two
gateway replicas, the embedded variant's engine deployment and the shared rate counter; two
fault servers play remote variants ``a`` and ``b``. Each response names its gateway replica
(``x-turnout-replica``). Ray's files go to a temp folder (``RAY_TMPDIR``), removed at the end.
Importing this module skips the importing test module where Ray is not installed.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.fault import FaultServer
from serving.auth import hash_key, key_prefix, new_key
from serving.launcher import gateway_process
from serving.store import RouteStore
from tests.integration.control_plane import ADMIN_TOKEN, fault_variant, write_config

ray = pytest.importorskip("ray", reason="Ray Serve is not installed: pip install 'turnout[ray]'")

RPM = 30  # the client key's requests per minute, shared by both gateway replicas


class Cluster:
    """The running ``turnout serve --ray`` process, and a Ray client connection to its cluster."""

    def __init__(
        self,
        url: str,
        pid: int,
        ray_dir: Path,
        key: str,
        faults: dict[str, FaultServer],
        log: Path | None = None,
    ) -> None:
        self.url, self.pid, self.ray_dir, self.key, self.faults = url, pid, ray_dir, key, faults
        self.log = log  # the turnout serve --ray process's output
        self.connected = False

    def connect(self) -> None:
        if not self.connected:
            ray.init(address="auto", namespace="serve", logging_level="ERROR", log_to_driver=False)
            self.connected = True

    def disconnect(self) -> None:
        if self.connected:
            ray.shutdown()
            self.connected = False

    def actor(self, deployment: str) -> Any:
        self.connect()
        actors = ray.util.list_named_actors(all_namespaces=True)
        names = [actor["name"] for actor in actors if deployment in actor["name"]]
        assert names, f"no replica of {deployment}"
        return ray.get_actor(names[0], namespace="serve")

    def processes(self) -> list[psutil.Process]:
        """The turnout process and everything it started (Ray's GCS, raylet, workers…)."""
        root = psutil.Process(self.pid)
        return [root, *root.children(recursive=True)]


def keep_logs(ray_dir: Path, keep: Path) -> None:
    """Ray's logs (Serve's replica logs, workers' stderr) out of the folder about to be removed."""
    logs = ray_dir / "ray" / "session_latest" / "logs"
    if logs.is_dir():
        skip = shutil.ignore_patterns("*.pb", "events", "*.sock")
        shutil.copytree(logs, keep, ignore=skip, dirs_exist_ok=True)
        print(f"Ray logs of the failed run kept in {keep}")


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """Fault servers ``a`` and ``b``, and ``turnout serve --ray --replicas 2`` in front of them
    and the embedded ``tiny``, until the block ends; a client key limited to ``RPM``."""
    ray_dir = Path(tempfile.mkdtemp(prefix="trt-ray-", dir="/tmp"))  # short: Ray's socket paths
    saved = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(ray_dir)  # the launched cluster and this test's client alike
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, ray_dir, ignore_errors=True)
        faults = {name: stack.enter_context(FaultServer(reply=f"answer from {name}")) for name in "ab"}
        variants = {**{n: fault_variant(f) for n, f in faults.items()}, "tiny": {"kind": "embedded"}}
        routes = {"chat": {"targets": [{"variant": "a"}]}, "tiny": {"targets": [{"variant": "tiny"}]}}
        config = write_config(ray_dir / "gateway.yaml", variants, routes)
        store = RouteStore(f"sqlite:///{ray_dir / 'routes.db'}")  # the file write_config names
        key = new_key("client")
        store.add_key(name="limited", role="client", key_hash=hash_key(key), prefix=key_prefix(key), rpm=RPM,
                      actor="test")  # fmt: skip
        store.close()
        env = {"TURNOUT_ADMIN_TOKEN": ADMIN_TOKEN}
        launched = stack.enter_context(
            gateway_process(config, timeout=150, env=env, extra_args=("--ray", "--replicas", "2"))
        )
        running = Cluster(launched.url, launched.pid, ray_dir, key, faults, launched.log)
        stack.callback(running.disconnect)
        both_replicas_answering(running.url)
        yield running
    if saved is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = saved


def chat(url: str, model: str = "chat", key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    payload = {"model": model, "messages": [{"role": "user", "content": "12+34="}], **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def both_replicas_answering(url: str, timeout: float = 60.0) -> None:
    """Until both gateway replicas have answered a chat. ``/ready`` needs only one of them (each
    replica warms up on its own), and Serve's proxy answers 404 for a new application's route
    until it has learned it, a moment after ``serve.run`` returns."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < 2 and time.monotonic() < deadline:
        reply = chat(url)
        if reply.status_code == 200:
            seen.add(reply.headers["x-turnout-replica"])
        else:
            time.sleep(0.2)
    assert len(seen) == 2, f"only {seen} answered within {timeout:.0f}s"


def kill_actor(actor: Any, **options: Any) -> None:
    """``ray.kill`` only asks; return once the actor is dead, so that 'after the kill' means it."""
    ray.kill(actor, **options)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:  # ActorDiedError too
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError(f"{actor} still alive 30 s after ray.kill")


def answer_of(reply: httpx.Response) -> str:
    return str(reply.json()["choices"][0]["message"]["content"]) if reply.status_code == 200 else reply.text


def answers(url: str, count: int, **kwargs: Any) -> collections.Counter[tuple[str, str]]:
    """(replica, answer) of ``count`` requests sent 8 at a time."""

    def one(_: int) -> tuple[str, str]:
        reply = chat(url, **kwargs)
        return reply.headers.get("x-turnout-replica", "?"), answer_of(reply)

    with ThreadPoolExecutor(8) as pool:
        return collections.Counter(pool.map(one, range(count)))


def applied_within(url: str, expected: str, since: float, timeout: float = 5.0) -> dict[str, float]:
    """Per replica: seconds after ``since`` at which its last answer other than ``expected`` was sent."""
    seen: list[tuple[float, str, str]] = []  # (sent, replica, answer)

    def one(_: int) -> None:
        sent = time.monotonic()
        reply = chat(url)
        seen.append((sent, reply.headers.get("x-turnout-replica", "?"), answer_of(reply)))

    with ThreadPoolExecutor(4) as pool:
        while time.monotonic() - since < timeout:
            list(pool.map(one, range(4)))
            replicas = {replica for _, replica, _ in seen}
            last_stale = {r: max((s for s, rr, a in seen if rr == r and a != expected), default=since)
                          for r in replicas}  # fmt: skip
            settled = {r: sum(1 for s, rr, _ in seen if rr == r and s > last_stale[r]) for r in replicas}
            if len(replicas) == 2 and min(settled.values()) >= 3:
                return {r: t - since for r, t in last_stale.items()}
    raise AssertionError(f"not applied by both replicas within {timeout}s: {collections.Counter(seen)}")


def metric_samples(page: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of ``name`` (``metric`` or ``metric{label="value",…}``, labels to match) on a page."""
    wanted_name, _, rest = name.partition("{")
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == wanted_name and all(s.labels.get(k) == v for k, v in wanted.items())
    ]


def metric_per_replica(url: str, name: str) -> dict[str, float]:
    """``name``'s value per gateway replica: a series each replica counts itself from its
    ``gateway_replica`` label (any replica's page holds every replica's), the engines' shared
    figures (no such label) as each replica answering a scrape shows them (scraped 4 at a time
    until both have answered)."""
    values: dict[str, float] = {}

    def scrape(_: int) -> None:
        reply = httpx.get(f"{url}/metrics", timeout=10)
        for labels, value in metric_samples(reply.text, name):
            values[labels.get("gateway_replica", reply.headers["x-turnout-replica"])] = value

    with ThreadPoolExecutor(4) as pool:
        for _ in range(20):
            list(pool.map(scrape, range(4)))
            if len(values) == 2:
                break
    return values
