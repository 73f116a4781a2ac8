"""``turnout eval`` refuses what cannot run with a message and status 2, never a traceback or a hang."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

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


class NotAnAnswer(BaseHTTPRequestHandler):
    """A server that says 200 to every POST with a body that is no OpenAI answer."""

    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = self.bodies[0] if self.bodies else b"not json at all"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("body", "tasks", "message"),
    [
        (
            b"not json at all",
            "addition",
            "completions answered 200 without a completion (JSONDecodeError",
        ),
        (b'{"choices": []}', "addition", "answered 200 without a completion (IndexError"),
        (b'{"choices": [{"logprobs": null}]}', "text", "scoring answered 200 without echoed logprobs"),
    ],
)
def test_a_200_that_is_no_answer_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, tasks: str, message: str
) -> None:
    NotAnAnswer.bodies = [body]
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotAnAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = f"http://127.0.0.1:{server.server_address[1]}"
        args = ["eval", "--target", target, "--model", "m", "--tasks", tasks, "--limit", "2",
                "--out", str(tmp_path / "run")]  # fmt: skip
        assert main(args) == 2  # it was a JSONDecodeError traceback, exit 1
        assert message in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


def test_a_null_chat_content_is_no_text_not_the_word_none(tmp_path: Path) -> None:
    """A reasoning model that spent max_tokens reasoning answers content null: it was scored as
    the text "None"."""
    NotAnAnswer.bodies = [b'{"choices": [{"message": {"role": "assistant", "content": null}}]}']
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotAnAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = f"http://127.0.0.1:{server.server_address[1]}"
        out = tmp_path / "run"
        args = ["eval", "--target", target, "--model", "m", "--tasks", "addition", "--limit", "2", "--chat",
                "--out", str(out)]  # fmt: skip
        assert main(args) == 0
        records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        assert [r["output"] for r in records] == ["", ""] and not any(r["correct"] for r in records)
    finally:
        server.shutdown()
        server.server_close()


def test_a_top1_agreement_nothing_measured_is_not_zero() -> None:
    from evals.runner import _top1

    assert _top1([], 0) == {"value": None, "ci95": None, "n": 0}  # it was 0.0: "no agreement at all"


class ListsModels(NotAnAnswer):
    """A server whose /v1/models lists one model, ``served``."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "served", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["--model", "nope"], "--model nope: {target} does not serve the route 'nope'; it serves: served"),
        (
            ["--model", "served", "--reference", "nope"],
            "--reference nope: {target} does not serve the route 'nope'; it serves: served",
        ),
    ],
)
def test_a_model_the_target_does_not_list_is_refused_before_any_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], names: list[str], message: str
) -> None:
    """It used to run to its first prompt and print the raw 404 body after the progress bar."""
    NotAnAnswer.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ListsModels)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["eval", "--target", target, *names, "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert message.format(target=target) in err and "eval " not in err  # no progress bar began
    finally:
        server.shutdown()
        server.server_close()
