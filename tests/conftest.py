"""Shared fixtures: one real gateway on the shipped model for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serving.launcher import gateway_process


@pytest.fixture(scope="session")
def gateway_url() -> Iterator[str]:
    """A ``turnout serve`` process with the default config (the shipped model, 3 precisions)."""
    with gateway_process() as gateway:
        yield gateway.url
