"""The Batch API through the official ``openai`` client: ``client.files`` and ``client.batches``.

A gateway on the embedded engine that serves only known keys, two client keys made over the admin
API. A batch's every line is answered as the same request sent alone is (greedy answers compared
one by one), a refused line's answer goes to the error file, on each endpoint a batch may send;
a file with wrong lines fails the batch with each line's error; batches and files are their key's
alone. Bad requests get the OpenAI error body and the gateway keeps serving.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from serving.launcher import Launched
from tests.integration.control_plane import eventually, metric_value
from tests.integration.keyed_clients import keyed_tiny_gateway

MAX_FILE_BYTES = 200_000
SUMS = [f"{a:02d}+{b:02d}=" for a, b in ((12, 34), (5, 5), (40, 17), (9, 81), (33, 33), (7, 60))]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, dict[str, openai.OpenAI]]]:
    folder = tmp_path_factory.mktemp("batches")
    with keyed_tiny_gateway(folder, ("alice", "bob"), batches={"max_file_bytes": MAX_FILE_BYTES}) as running:
        yield running


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _run(client: openai.OpenAI, lines: list[dict[str, Any]], endpoint: str, **extra: Any) -> Any:
    """Upload ``lines``, make a batch of them and wait for its end."""
    uploaded = client.files.create(file=("input.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        **extra,
    )
    seen: list[Any] = [batch]
    ended = ("completed", "failed", "expired", "cancelled")
    eventually(lambda: seen.append(client.batches.retrieve(batch.id)) or seen[-1].status in ended, 90)
    return seen[0], seen[-1]


def _file_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [orjson.loads(line) for line in client.files.content(file_id).content.splitlines()]


def test_each_line_is_answered_as_the_same_request_sent_alone(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    alice, bob = keys[1]["alice"], keys[1]["bob"]
    asks = [
        {
            "model": "turnout-tiny",
            "messages": [{"role": "user", "content": s}],
            "max_tokens": 8,
            "temperature": 0,
        }
        for s in SUMS
    ]
    lines = [_line(f"sum-{n}", "/v1/chat/completions", ask) for n, ask in enumerate(asks)]
    lines.append(_line("unknown-model", "/v1/chat/completions", {**asks[0], "model": "nope"}))
    lines.append(_line("streamed", "/v1/chat/completions", {**asks[0], "stream": True}))
    made, batch = _run(alice, lines, "/v1/chat/completions", metadata={"job": "sums"})
    assert made.status == "validating" and made.request_counts.total == len(lines)
    assert batch.status == "completed" and batch.metadata == {"job": "sums"}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    assert batch.request_counts.completed == len(SUMS) and batch.request_counts.failed == 2
    outputs = _file_lines(alice, batch.output_file_id)
    assert [line["custom_id"] for line in outputs] == [f"sum-{n}" for n in range(len(SUMS))]
    input_tokens = output_tokens = 0
    for line, ask in zip(outputs, asks, strict=True):
        alone = alice.chat.completions.create(**ask)
        answer = line["response"]
        assert answer["status_code"] == 200 and answer["request_id"] and line["error"] is None
        assert answer["body"]["choices"][0]["message"]["content"] == alone.choices[0].message.content
        assert answer["body"]["usage"]["prompt_tokens"] == alone.usage.prompt_tokens  # type: ignore[union-attr]
        input_tokens += answer["body"]["usage"]["prompt_tokens"]
        output_tokens += answer["body"]["usage"]["completion_tokens"]
    assert batch.usage.input_tokens == input_tokens and batch.usage.output_tokens == output_tokens
    errors = {line["custom_id"]: line["response"] for line in _file_lines(alice, batch.error_file_id)}
    assert errors["unknown-model"]["status_code"] == 404
    assert errors["unknown-model"]["body"]["error"]["code"] == "model_not_found"
    assert (
        errors["streamed"]["status_code"] == 400 and errors["streamed"]["body"]["error"]["param"] == "stream"
    )
    output = alice.files.retrieve(batch.output_file_id)
    assert output.purpose == "batch_output" and output.filename == f"{batch.id}_output.jsonl"
    listed = [found.id for found in alice.files.list()]
    assert {batch.output_file_id, batch.error_file_id, batch.input_file_id} <= set(listed)
    assert alice.batches.list().data[0].id == batch.id
    assert alice.files.content(batch.input_file_id).content == _jsonl(lines)
    with pytest.raises(openai.BadRequestError) as not_input:  # an output file is not a batch's input
        alice.batches.create(
            input_file_id=output.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert not_input.value.param == "input_file_id"
    # Bob reaches none of it.
    for call in (
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.files.retrieve(output.id),
        lambda: bob.files.content(output.id),
        lambda: bob.files.delete(output.id),
        lambda: bob.batches.create(
            input_file_id=batch.input_file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert all(found.id not in listed for found in bob.files.list())
    assert alice.files.delete(output.id).deleted
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(output.id)


@pytest.mark.parametrize(
    ("endpoint", "body", "answer_object"),
    [
        (
            "/v1/completions",
            {"model": "turnout-tiny", "prompt": "12+34=", "max_tokens": 4},
            "text_completion",
        ),
        ("/v1/embeddings", {"model": "turnout-tiny", "input": ["12+34=", "hello"]}, "list"),
        ("/v1/responses", {"model": "turnout-tiny", "input": "12+34=", "max_output_tokens": 8}, "response"),
    ],
)
def test_a_batch_sends_each_endpoint_it_names(
    keys: tuple[Launched, dict[str, openai.OpenAI]], endpoint: str, body: dict[str, Any], answer_object: str
) -> None:
    alice = keys[1]["alice"]
    lines = [_line(f"{n}", endpoint, {**body, "temperature": 0}) for n in range(3)]
    if endpoint == "/v1/embeddings":
        lines = [_line(f"{n}", endpoint, body) for n in range(3)]
    _, batch = _run(alice, lines, endpoint)
    assert batch.status == "completed" and batch.request_counts.completed == 3, batch
    answers = [line["response"]["body"] for line in _file_lines(alice, batch.output_file_id)]
    assert [answer["object"] for answer in answers] == [answer_object] * 3
    assert batch.usage.input_tokens > 0 and batch.error_file_id is None


def test_a_file_with_wrong_lines_fails_the_batch_with_each_lines_error(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    alice = keys[1]["alice"]
    failed_before = metric_value(keys[0].url, "turnout_batches_ended_total", status="failed")
    good = _line("a", "/v1/chat/completions", {"model": "turnout-tiny", "messages": []})
    content = b"\n".join(
        [
            orjson.dumps(good),
            b"{not json",
            orjson.dumps({**good, "custom_id": "b", "url": "/v1/completions"}),
            orjson.dumps(good),  # custom_id "a" again
        ]
    )
    uploaded = alice.files.create(file=("wrong.jsonl", io.BytesIO(content)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "failed" and batch.failed_at is not None and batch.errors is not None
    found = [(error.line, error.code) for error in batch.errors.data or []]
    assert found == [(2, "invalid_json_line"), (3, "mismatched_endpoint"), (4, "duplicate_custom_id")]
    assert batch.request_counts.total == 0 and batch.output_file_id is None
    assert alice.batches.retrieve(batch.id).status == "failed"
    assert metric_value(keys[0].url, "turnout_batches_ended_total", status="failed") == failed_before + 1


def _refusals(base: str, key: str) -> list[tuple[str, httpx.Response, int, str | None]]:
    auth = {"authorization": f"Bearer {key}"}

    def post(path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{base}{path}", headers=auth, timeout=10, **kwargs)

    def get(path: str) -> httpx.Response:
        return httpx.get(f"{base}{path}", headers=auth, timeout=10)

    def upload(content: bytes = b"{}", **fields: str) -> httpx.Response:
        return post("/v1/files", files={"file": ("a.jsonl", content)}, data=fields)

    def make(**changed: Any) -> httpx.Response:
        return post("/v1/batches", json={**batch, **changed})

    batch = {"input_file_id": upload(purpose="batch").json()["id"], "endpoint": "/v1/chat/completions"}
    batch["completion_window"] = "24h"
    short = {"expires_after[anchor]": "created_at", "expires_after[seconds]": "60"}
    return [
        ("moderations endpoint", make(endpoint="/v1/moderations"), 400, "endpoint"),
        ("a 1h window", make(completion_window="1h"), 400, "completion_window"),
        ("no such input file", make(input_file_id="file-x"), 404, "input_file_id"),
        ("an unknown field", make(priority=1), 400, "priority"),
        ("not JSON", post("/v1/batches", content=b"{"), 400, None),
        ("17 metadata pairs", make(metadata={str(n): "" for n in range(17)}), 400, "metadata"),
        ("fine-tune purpose", upload(purpose="fine-tune"), 400, "purpose"),
        ("no purpose", upload(), 400, "purpose"),
        (
            "no file field",
            post("/v1/files", data={"purpose": "batch"}, files={"x": ("a", b"x")}),
            400,
            "file",
        ),
        ("json, not a form", post("/v1/files", json={"purpose": "batch"}), 400, "file"),
        ("an empty file", upload(b"", purpose="batch"), 400, "file"),
        ("too big", upload(b"x" * (MAX_FILE_BYTES + 1), purpose="batch"), 413, "file"),
        ("expiry too short", upload(purpose="batch", **short), 400, "expires_after.seconds"),
        ("no such file", get("/v1/files/file-x"), 404, "file_id"),
        ("no such content", get("/v1/files/file-x/content"), 404, "file_id"),
        ("no such batch", get("/v1/batches/batch_x"), 404, "batch_id"),
        ("cancel no such batch", post("/v1/batches/batch_x/cancel"), 404, "batch_id"),
        ("limit 0", get("/v1/batches?limit=0"), 400, "limit"),
        ("files purpose zzz", get("/v1/files?purpose=zzz"), 400, "purpose"),
        ("files order up", get("/v1/files?order=up"), 400, "order"),
    ]


def test_bad_requests_get_the_openai_error_body_and_the_gateway_keeps_serving(
    keys: tuple[Launched, dict[str, openai.OpenAI]],
) -> None:
    gateway, clients = keys
    key = clients["alice"].api_key
    wrong = []
    for name, answer, status, param in _refusals(gateway.url, key):
        error = (
            answer.json().get("error") if answer.headers.get("content-type") == "application/json" else None
        )
        if (
            answer.status_code != status
            or error is None
            or set(error) != {"message", "type", "param", "code"}
        ):
            wrong.append((name, answer.status_code, answer.text[:200]))
        elif param is not None and error["param"] != param:
            wrong.append((name, "param", error["param"]))
    assert not wrong
    ask = {"model": "turnout-tiny", "messages": [{"role": "user", "content": "12+34="}], "max_tokens": 4}
    assert clients["alice"].chat.completions.create(**ask).choices[0].message.content
