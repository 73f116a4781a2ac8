"""A client's x-request-id is echoed (headers, answer ids, admin errors) only when fit to be."""

from __future__ import annotations

import pytest

from serving.api.errors import client_request_id
from serving.api.openai_routes import request_id


@pytest.mark.parametrize("sent", ["abc123", "req-7f/3:x", "a" * 128])
def test_a_sane_id_is_kept(sent: str) -> None:
    assert client_request_id(sent) == sent and request_id(sent) == sent


@pytest.mark.parametrize("sent", [None, "", "a" * 129, "tab\there", "é-id"])
def test_anything_else_is_not_echoed_and_a_new_id_is_made(sent: str | None) -> None:
    assert client_request_id(sent) is None
    made = request_id(sent)
    assert made != sent and len(made) == 32
