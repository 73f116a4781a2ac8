"""OpenAI request fields an adapter cannot express are a clear 400, never silently dropped."""

from __future__ import annotations

from typing import Any

import pytest

from backends.openai_fields import check_extra
from serving.errors import ClientError
from serving.protocol import CompletionRequest

ENGINE = "the embedded engine"


@pytest.mark.parametrize(
    "extra",
    [
        {"store": True, "metadata": {"a": "b"}, "service_tier": "auto", "parallel_tool_calls": False},
        {"user": "alice"},
        {"suffix": None},
        {"suffix": ""},
        {"response_format": {"type": "text"}},
        {"functions": [], "function_call": "none", "modalities": ["text"], "reasoning_effort": None},
        {"prompt_cache_key": "tenant-7", "safety_identifier": "hash-of-alice"},
        {  # what a client built for vLLM sends at vLLM's defaults
            "repetition_penalty": 1.0,
            "min_tokens": 0,
            "min_p": 0.0,
            "skip_special_tokens": True,
            "spaces_between_special_tokens": True,
            "include_stop_str_in_output": False,
            "use_beam_search": False,
        },
    ],
)
def test_fields_that_do_not_change_the_answer_are_accepted(extra: dict[str, Any]) -> None:
    assert check_extra(extra, ENGINE) == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("suffix", " and that is all"),
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
        ("functions", [{"name": "f", "parameters": {}}]),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("reasoning_effort", "high"),
        ("repetition_penalty", 1.2),
        ("min_tokens", 5),
        ("skip_special_tokens", False),
        ("include_stop_str_in_output", True),
    ],
)
def test_known_fields_the_engine_cannot_express_are_named(name: str, value: Any) -> None:
    with pytest.raises(ClientError) as caught:
        check_extra({name: value}, ENGINE)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, name, "unsupported_value")
    assert str(error) == f"'{name}' is not supported by {ENGINE}"


def test_an_unknown_field_gets_openais_wording() -> None:
    with pytest.raises(ClientError, match="Unrecognized request argument supplied: respons_format") as caught:
        check_extra({"respons_format": {"type": "json_object"}}, ENGINE)
    assert caught.value.code == "unknown_field"


def test_a_mapped_field_is_passed_at_any_value() -> None:
    fmt = {"type": "json_object"}
    assert check_extra({"response_format": fmt}, "X", mapped={"response_format"}) == {"response_format": fmt}


def test_the_openai_user_field_travels_to_the_backend() -> None:
    """An OpenAI-compatible upstream gets ``user`` (another Turnout routes stickily by it);
    engines that do not speak OpenAI accept and ignore it."""
    from serving.protocol import ChatCompletionRequest, CompletionRequest

    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "alice"}
    )
    assert chat.to_generates("r")[0].extra == {"user": "alice"}
    batch = CompletionRequest.model_validate({"model": "m", "prompt": ["a", "b"], "user": "bob", "x": 1})
    assert [g.extra for g in batch.to_generates("r")] == [{"x": 1, "user": "bob"}] * 2
    plain = CompletionRequest.model_validate({"model": "m", "prompt": "a"})
    assert plain.to_generates("r")[0].extra == {}


def test_vllms_ignore_eos_sent_as_null_means_false() -> None:
    request = CompletionRequest.model_validate({"model": "m", "prompt": "1+2=", "ignore_eos": None})
    assert request.sampling().ignore_eos is False
