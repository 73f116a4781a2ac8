"""Helpers for control-plane tests: fault-server variants, a gateway process per test, admin calls.

Each test gets its own SQLite store (``store.url`` in the config it writes), so route
changes never leak between tests; ``TURNOUT_ADMIN_TOKEN`` gives the admin bearer token.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import yaml

from backends.fault import FaultServer
from serving.launcher import Launched, gateway_process

ADMIN_TOKEN = "tadm-test-admin-token"


def fault_variant(server: FaultServer, read_timeout: float = 10.0) -> dict[str, Any]:
    return {
        "kind": "openai_http",
        "base_url": server.base_url,
        "model": "fake-model",
        "engine": "vllm",
        "vendor": "cpu",
        "accelerator": "cpu-x86",
        "timeouts": {"connect": 1.0, "read": read_timeout, "pool": 1.0},
    }


def write_config(path: Path, variants: dict[str, Any], routes: dict[str, Any], **sections: Any) -> Path:
    config = {
        "variants": variants,
        "routes": routes,
        "store": {"url": f"sqlite:///{path.parent / 'routes.db'}", "poll_interval_s": 0.1},
        "auth": {"anonymous_clients": True},
        **sections,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def running_gateway(config: Path, env: dict[str, str] | None = None) -> Iterator[Launched]:
    with gateway_process(config, env={"TURNOUT_ADMIN_TOKEN": ADMIN_TOKEN, **(env or {})}) as gateway:
        yield gateway


@contextmanager
def keyed_gateway(folder: Path) -> Iterator[tuple[Launched, Path]]:
    """A gateway (and its config file) that serves route ``chat`` from one fault upstream
    answering "hello there" and refuses callers without a known key."""
    with FaultServer(reply="hello there") as upstream:
        config = write_config(
            folder / "gateway.yaml",
            {"a": fault_variant(upstream)},
            {"chat": {"targets": [{"variant": "a"}]}},
            auth={"anonymous_clients": False},
        )
        with running_gateway(config) as launched:
            yield launched, config


def fault_batch(client: openai.OpenAI, faults: list[str]) -> Any:
    """A Batch API chat batch on route ``chat``, one line (``line-N``) per fault script
    (``latency=…``, ``ok``), in that order."""
    lines = [
        {
            "custom_id": f"line-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "x_fault": fault},
        }
        for n, fault in enumerate(faults)
    ]
    content = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    uploaded = client.files.create(file=("input.jsonl", io.BytesIO(content)), purpose="batch")
    return client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def admin(token: str | None = ADMIN_TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def chat(
    base: str,
    model: str = "chat",
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    **body: Any,
) -> httpx.Response:
    headers = {**({"x-turnout-key": key} if key else {}), **(headers or {})}
    payload = {"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
    return httpx.post(f"{base}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def put_route(
    base: str, name: str, spec: dict[str, Any], *, version: int | None = None, reason: str = "test"
) -> httpx.Response:
    headers = admin()
    if version is not None:
        headers["if-match"] = f'"{version}"'
    return httpx.put(f"{base}/admin/routes/{name}", json={"spec": spec, "reason": reason}, headers=headers)


def eventually(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    """Seconds until ``check()`` held; fails the test after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def metric_value(base: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    text = httpx.get(f"{base}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
