"""``turnout batches``: its table, and its refusals before and without a gateway."""

from __future__ import annotations

import pytest

from serving.cli import main
from serving.cli_batches import batches_table
from serving.launcher import free_port


def test_the_table_shows_whose_each_batch_is_and_its_requests() -> None:
    batch = {
        "id": "batch_1",
        "key": "alice",
        "status": "in_progress",
        "request_counts": {"total": 5, "completed": 3, "failed": 1},
        "endpoint": "/v1/embeddings",
        "model": "turnout-tiny",
        "created_at": 0,
    }
    lines = batches_table([batch, {**batch, "id": "batch_2", "key": None, "model": None}]).split("\n")
    assert lines[0].split() == ["id", "key", "status", "done/failed/total", "endpoint", "model", "created"]
    shown = ["batch_1", "alice", "in_progress", "3/1/5", "/v1/embeddings", "turnout-tiny", "1970-01-01"]
    assert lines[2].split() == [*shown, "00:00:00Z"]
    assert lines[3].split()[1] == "(revoked)" and lines[3].split()[5] == "-"


def test_a_limit_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batches", "list", "--limit", "0"]) == 2
    assert "--limit must be from 1 to 100" in capsys.readouterr().err


def test_no_gateway_at_the_url_is_said_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["batches", "cancel", "batch_1", "--url", url, "--token", "t"]) == 1
    assert f"cannot reach the gateway at {url}" in capsys.readouterr().err
