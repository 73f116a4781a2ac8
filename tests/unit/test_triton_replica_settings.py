"""Triton variants with replicas: every server needs its endpoint and its metrics page."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backends.settings import TritonSettings

B = {"url": "http://b:8000", "metrics_url": "http://b:1/m"}
BASE = {"preset": "turnout-tiny", "url": "http://a:8000", "metrics_url": "http://a:8002/metrics"}


def test_servers_lists_this_one_first_then_the_replicas() -> None:
    settings = TritonSettings.model_validate(
        {**BASE, "replicas": [{"url": "http://b:8000", "metrics_url": "http://b:8002/metrics"}]}
    )
    assert [str(s.url) for s in settings.servers()] == ["http://a:8000/", "http://b:8000/"]
    assert [str(s.metrics_url) for s in settings.servers()][1] == "http://b:8002/metrics"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"replicas": [{"url": "http://b:8000"}]}, "replicas.0.metrics_url: a replicated variant"),
        ({"metrics_url": None, "replicas": [B]}, "metrics_url"),
        ({"replicas": [{"grpc_url": "b:8001", "metrics_url": "http://b:1/m"}]}, "replicas.0.url: protocol"),
        ({"replicas": [{"url": "http://a:8000", "metrics_url": "http://b:1/m"}]}, "all be different servers"),
    ],
)
def test_bad_replicas_are_refused_naming_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TritonSettings.model_validate({**BASE, **changes})
