"""Batch and Files API rules without a server or a store: the input file's lines and the errors
that fail a batch, a new batch's refusals, a line's model, usage and retry wait, and the batch and
file objects as OpenAI's own client reads them (``openai.types``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import openai.types
import orjson
import pytest

from serving.batches import (
    COMPLETED,
    ENDPOINTS,
    STATE_TIMES,
    UNAVAILABLE_TRIES,
    BatchLine,
    BatchRecord,
    NewBatch,
    RequestCounts,
    model_of,
    read_input,
    retry_wait,
    usage_of,
)
from serving.errors import ClientError
from serving.files import StoredFile, listed_purpose, upload_name, upload_purpose

CHAT = "/v1/chat/completions"


def _line(custom_id: Any = "r1", **changed: Any) -> bytes:
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {"model": "m", "messages": []}}
    line.update(changed)
    return orjson.dumps(line)


def _read(content: bytes, max_requests: int = 10, max_body_bytes: int = 1000) -> Any:
    return read_input(content, CHAT, max_requests=max_requests, max_body_bytes=max_body_bytes)


def test_good_lines_are_indexed_from_zero_with_their_body_as_json_and_blank_lines_skipped() -> None:
    content = b"\n".join([_line("a"), b"", b"   ", _line("b", body={"model": "m", "n": 2}), b""])
    lines, errors = _read(content)
    assert errors == []
    assert lines == [
        BatchLine(0, "a", '{"model":"m","messages":[]}'),
        BatchLine(1, "b", '{"model":"m","n":2}'),
    ]
    assert orjson.loads(lines[1].body) == {"model": "m", "n": 2}
    crlf, _ = _read(_line("a") + b"\r\n" + _line("b") + b"\r\n")
    assert [line.custom_id for line in crlf] == ["a", "b"]


@pytest.mark.parametrize(
    ("wrong", "code", "param"),
    [
        (b"{not json", "invalid_json_line", None),
        (b"[1, 2]", "invalid_json_line", None),
        (_line("x", extra=1), "invalid_request", "extra"),
        (
            orjson.dumps({"method": "POST", "url": CHAT, "body": {}}),
            "missing_required_parameter",
            "custom_id",
        ),
        (_line(""), "missing_required_parameter", "custom_id"),
        (_line(7), "missing_required_parameter", "custom_id"),
        (_line("first"), "duplicate_custom_id", "custom_id"),
        (_line("x", method="GET"), "invalid_method", "method"),
        (_line("x", url="/v1/embeddings"), "mismatched_endpoint", "url"),
        (_line("x", body=[1]), "missing_required_parameter", "body"),
        (_line("x", body={"model": "m", "prompt": "x" * 2000}), "request_too_large", "body"),
    ],
)
def test_a_wrong_line_fails_the_batch_naming_its_code_and_line_from_one(
    wrong: bytes, code: str, param: str | None
) -> None:
    content = b"\n".join([_line("first"), b"", wrong, _line("last")])
    lines, errors = _read(content)
    assert lines == []  # any error: no line is kept
    assert len(errors) == 1
    assert errors[0]["code"] == code and errors[0]["param"] == param
    assert errors[0]["line"] == 3 and errors[0]["message"]


def test_every_wrong_line_is_listed_up_to_one_hundred() -> None:
    _, errors = _read(b"\n".join([b"nope"] * 150), max_requests=1000)
    assert len(errors) == 100 and [error["line"] for error in errors[:3]] == [1, 2, 3]


@pytest.mark.parametrize(
    ("content", "max_requests", "code"),
    [
        (b"\xff\xfe" + _line(), 10, "invalid_file"),
        (b"", 10, "empty_file"),
        (b"\n  \n\n", 10, "empty_file"),
        (b"\n".join(_line(f"r{n}") for n in range(3)), 2, "too_many_requests"),
    ],
)
def test_a_wrong_file_fails_the_batch_with_no_line_named(
    content: bytes, max_requests: int, code: str
) -> None:
    lines, errors = _read(content, max_requests=max_requests)
    assert lines == [] and len(errors) == 1
    assert errors[0]["code"] == code and errors[0]["line"] is None and errors[0]["param"] is None
    assert _read(b"\n".join(_line(f"r{n}") for n in range(2)), max_requests=2)[1] == []  # at the limit


def test_a_line_with_a_raw_unicode_line_separator_in_a_string_is_one_request() -> None:
    content = _line("a", body={"model": "m", "prompt": "one\u2028two"}) + b"\n" + _line("b")
    lines, errors = _read(content)
    assert errors == [] and [line.custom_id for line in lines] == ["a", "b"]


@pytest.mark.parametrize(
    ("changed", "param"),
    [
        ({"endpoint": "/v1/images/generations"}, "endpoint"),
        ({"completion_window": "48h"}, "completion_window"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
    ],
)
def test_a_new_batch_is_refused_naming_the_wrong_field(changed: dict[str, Any], param: str) -> None:
    body = {"input_file_id": "file-1", "endpoint": CHAT, "completion_window": "24h", **changed}
    with pytest.raises(ClientError) as refused:
        NewBatch.model_validate(body).check()
    assert refused.value.status == 400 and refused.value.param == param


def test_a_new_batch_for_each_endpoint_with_sixteen_metadata_pairs_is_accepted() -> None:
    for endpoint in ENDPOINTS:
        metadata = {f"k{n}": "v" for n in range(16)}
        NewBatch(
            input_file_id="file-1", endpoint=endpoint, completion_window="24h", metadata=metadata
        ).check()


def test_a_batch_has_a_model_only_when_every_line_names_the_same_one() -> None:
    def lines(*bodies: dict[str, Any]) -> list[BatchLine]:
        return [BatchLine(n, f"r{n}", orjson.dumps(body).decode()) for n, body in enumerate(bodies)]

    assert model_of(lines({"model": "m"}, {"model": "m", "n": 1})) == "m"
    assert model_of(lines({"model": "m"}, {"model": "other"})) is None
    assert model_of(lines({"model": "m"}, {})) is None
    assert model_of(lines({"model": 3})) is None


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}, (5, 7)),
        ({"usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}, (3, 4)),
        ({"object": "list", "usage": {"prompt_tokens": 9, "total_tokens": 9}}, (9, 0)),
        ({"usage": {"prompt_tokens": "5", "completion_tokens": None}}, (0, 0)),
        ({"usage": None}, (0, 0)),
        ({}, (0, 0)),
        ([1, 2], (0, 0)),
        ("an error page", (0, 0)),
        (None, (0, 0)),
    ],
)
def test_a_lines_usage_is_read_from_chat_responses_and_embeddings_answers(
    body: Any, tokens: tuple[int, int]
) -> None:
    assert usage_of(body) == tokens


def test_only_a_429_or_503_is_sent_again_waiting_its_retry_after_at_most_30_s() -> None:
    for final in (200, 400, 404, 500):
        assert retry_wait(final, "1", 0) is None
    assert retry_wait(429, "2", 5) == 2.0 and retry_wait(503, "0", 0) == 0.0
    assert retry_wait(429, "1.5", 0) == 1.5 and retry_wait(503, "3600", 0) == 30.0


def test_without_a_usable_retry_after_the_wait_doubles_from_half_a_second_to_30_s() -> None:
    waits = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert [retry_wait(429, None, attempt) for attempt in range(9)] == waits
    assert [retry_wait(503, None, attempt) for attempt in range(4)] == waits[:4]
    for unusable in ("soon", "-1", "nan", "inf", "Wed, 21 Oct 2015 07:28:00 GMT"):
        assert retry_wait(429, unusable, 2) == 2.0


def test_a_503_is_sent_at_most_unavailable_tries_times_and_a_429_until_the_batch_expires() -> None:
    last = UNAVAILABLE_TRIES - 1  # the attempt that is the last send
    assert retry_wait(503, None, last - 1) == 30.0 and retry_wait(503, "1", last - 1) == 1.0
    assert retry_wait(503, None, last) is None and retry_wait(503, "1", last) is None
    assert retry_wait(429, None, last) == 30.0 and retry_wait(429, "1", 500) == 1.0


def test_the_backoff_stays_at_30_s_however_many_attempts() -> None:
    assert retry_wait(429, None, 1024) == 30.0


def _record(**changed: Any) -> BatchRecord:
    made = BatchRecord(
        batch_id="batch_1",
        owner="alice",
        endpoint=CHAT,
        input_file_id="file-in",
        completion_window="24h",
        status="validating",
        created_at=100.9,
        expires_at=86500.9,
    )
    return replace(made, **changed)


BATCH_FIELDS = {
    "id", "object", "endpoint", "model", "errors", "input_file_id", "completion_window", "status",
    "output_file_id", "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at",
    "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at", "request_counts",
    "usage", "metadata",
}  # fmt: skip


def test_a_new_batchs_object_has_every_openai_field_and_the_client_reads_it() -> None:
    shown = _record().as_dict(RequestCounts(total=3))
    assert set(shown) == BATCH_FIELDS
    assert shown["object"] == "batch" and shown["errors"] is None and shown["metadata"] is None
    assert shown["created_at"] == 100 and shown["expires_at"] == 86500
    assert all(shown[name] is None for name in STATE_TIMES.values())
    assert shown["request_counts"] == {"total": 3, "completed": 0, "failed": 0}
    read = openai.types.Batch.model_validate(shown)
    assert read.id == "batch_1" and read.status == "validating" and read.request_counts is not None


def test_an_ended_batchs_object_has_int_times_errors_as_a_list_usage_and_counts() -> None:
    errors = [{"code": "invalid_json_line", "message": "x", "param": None, "line": 2}]
    times = {name: 200.7 for name in ("in_progress_at", "finalizing_at", "completed_at")}
    record = _record(
        status=COMPLETED,
        errors=errors,
        times=times,
        metadata={"job": "nightly"},
        model="m",
        output_file_id="file-out",
        error_file_id="file-err",
    )
    shown = record.as_dict(RequestCounts(total=4, completed=3, failed=1, input_tokens=10, output_tokens=5))
    assert shown["errors"] == {"object": "list", "data": errors}
    assert shown["in_progress_at"] == shown["completed_at"] == 200 and shown["failed_at"] is None
    assert all(isinstance(shown[name], int) for name in (*times, "created_at", "expires_at"))
    assert shown["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    assert shown["usage"]["input_tokens"] == 10 and shown["usage"]["output_tokens"] == 5
    assert shown["usage"]["total_tokens"] == 15
    read = openai.types.Batch.model_validate(shown)
    assert read.errors is not None and read.errors.data is not None and read.errors.data[0].line == 2
    assert read.usage is not None and read.usage.total_tokens == 15
    assert read.output_file_id == "file-out" and read.metadata == {"job": "nightly"}


def test_a_files_object_is_openais_and_the_client_reads_it() -> None:
    kept = StoredFile("file-1", "alice", "batch", "in.jsonl", 42, 100.9, None)
    shown = kept.as_dict()
    assert shown == {
        "id": "file-1",
        "object": "file",
        "bytes": 42,
        "created_at": 100,
        "expires_at": None,
        "filename": "in.jsonl",
        "purpose": "batch",
        "status": "processed",
        "status_details": None,
    }
    assert openai.types.FileObject.model_validate(shown).bytes == 42
    output = StoredFile("file-2", "alice", "batch_output", "b_output.jsonl", 7, 100.0, 2_592_100.5)
    read = openai.types.FileObject.model_validate(output.as_dict())
    assert read.expires_at == 2_592_100 and read.purpose == "batch_output"


def test_an_upload_is_for_batches_and_a_listing_for_batch_files_only() -> None:
    assert upload_purpose("batch") == "batch"
    for wrong in (None, "", "fine-tune", "batch_output"):
        with pytest.raises(ClientError) as refused:
            upload_purpose(wrong)
        assert refused.value.param == "purpose" and refused.value.status == 400
    assert listed_purpose(None) is None
    assert listed_purpose("batch") == "batch" and listed_purpose("batch_output") == "batch_output"
    with pytest.raises(ClientError) as refused:
        listed_purpose("assistants")
    assert refused.value.param == "purpose"


def test_an_uploads_name_loses_its_folders_and_defaults_when_empty() -> None:
    assert upload_name("in.jsonl") == "in.jsonl"
    assert upload_name("/home/me/work/in.jsonl") == "in.jsonl"
    assert upload_name("C:\\Users\\me\\in.jsonl") == "in.jsonl"
    assert upload_name("  spaced.jsonl ") == "spaced.jsonl"
    for empty in (None, "", "   ", "folder/"):
        assert upload_name(empty) == "upload.jsonl"
    assert len(upload_name("x" * 300)) == 255
