"""``turnout eval`` refuses what cannot run with a message and status 2, never a traceback or a hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.cli import main

DEAD = "http://127.0.0.1:9"  # nothing listens there


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tasks", ","], "--tasks: name at least one of: addition"),
        (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),  # it used to hang
        (["--limit", "-5"], "--limit must be at least 1"),  # it used to run 195 of 200
        (["--limit", "0"], "--limit must be at least 1"),  # it used to run all 200
        (["--limit", "2"], f"--target {DEAD}: ConnectError"),  # it used to be a traceback
    ],
)
def test_eval_refuses_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = ["eval", "--target", DEAD, "--model", "m", "--out", str(tmp_path / "run"), *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def _eval_run(folder: Path, model: str) -> Path:
    folder.mkdir(parents=True)
    addition = {"metric": "exact_match", "value": 1.0, "ci95": [0.98, 1.0], "n": 200}
    summary = {"schema": "turnout.eval/1", "model": model, "variants": {model: {}}, "agreement": None,
               "tasks": {"addition": addition}}  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    ("variants", "out", "message"),
    [
        (",", "report", "--variants: name at least one variant"),  # it used to be a StopIteration
        ("turnout-tiny,turnout-tiny-int9", "report", "no run measured turnout-tiny-int9; the runs measured"),
        ("turnout-tiny", "a-file", "--out"),  # it used to be a FileExistsError traceback
    ],
)
def test_compare_refuses_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], variants: str, out: str, message: str
) -> None:
    run = _eval_run(tmp_path / "eval", "turnout-tiny")
    (tmp_path / "a-file").write_text("not a folder")
    args = ["compare", "--variants", variants, "--eval", str(run), "--out", str(tmp_path / out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_compare_with_no_runs_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--variants", "a", "--out", str(tmp_path / "r")]) == 2
    assert "nothing to compare" in capsys.readouterr().err


def test_a_repeated_task_is_run_once() -> None:
    from evals.cli import parse_tasks

    assert parse_tasks("addition,addition") == ("addition",)  # it was scored twice
    assert parse_tasks(" continuation, addition,continuation,") == ("continuation", "addition")
