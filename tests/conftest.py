"""Shared fixtures: one real gateway on the shipped model for the whole session.

Every gateway a test starts keeps its routes, audit log and keys in a store under this
session's temp directory (``TURNOUT_STORE_URL``), never in the user's state directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.launcher import gateway_process

# Session-wide real engines (one vLLM server, one Triton server): fixtures ``vllm``, ``triton``.
pytest_plugins = ["tests.integration.engines"]

_STATE_DIR = Path(tempfile.mkdtemp(prefix="turnout-tests-"))
os.environ["TURNOUT_STORE_URL"] = f"sqlite:///{_STATE_DIR / 'session.db'}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_STATE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def gateway_url() -> Iterator[str]:
    """A ``turnout serve`` process with the default config (the shipped model, 3 precisions)."""
    with gateway_process() as gateway:
        yield gateway.url
