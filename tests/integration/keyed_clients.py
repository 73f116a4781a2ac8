"""A gateway on the embedded fp32 model that serves only known keys, and an ``openai`` client per
key made over the admin API: for tests of what each key keeps (stored responses, conversations)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai

from serving.launcher import Launched
from tests.integration.control_plane import admin, running_gateway, write_config

TINY = {"tiny": {"kind": "embedded", "precision": "fp32"}}
ROUTE = {"turnout-tiny": {"targets": [{"variant": "tiny"}]}}


@contextmanager
def keyed_tiny_gateway(
    folder: Path, names: tuple[str, ...], **sections: Any
) -> Iterator[tuple[Launched, dict[str, openai.OpenAI]]]:
    """``sections``: more of the gateway's config (``batches``, …)."""
    config = write_config(folder / "gateway.yaml", TINY, ROUTE, auth={"anonymous_clients": False}, **sections)
    with running_gateway(config) as gateway:
        clients = {}
        for name in names:
            made = httpx.post(f"{gateway.url}/admin/keys", json={"name": name}, headers=admin(), timeout=10)
            assert made.status_code == 201, made.text
            clients[name] = openai.OpenAI(
                base_url=f"{gateway.url}/v1", api_key=made.json()["key"], max_retries=0
            )
        yield gateway, clients
