"""Triton inputs are type-checked before they are sent: a wrong value is a 400 naming its field.

It used to reach the transport: ``bad_words: 5`` was a 502 TypeError (five of them opened the
variant's breaker), a string penalty a 502 ValueError over gRPC and Triton's 500 over HTTP.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import triton_to_np_dtype

from backends.base import GenerateRequest, SamplingParams
from backends.triton_grpc import to_array
from backends.triton_tensors import _MAPPED_EXTRAS, ModelFacts, plan_request
from backends.triton_types import EXTRA_KINDS, check_input
from serving.errors import ClientError


def plan(tensors: str, extra: dict[str, Any], **params: Any) -> Any:
    request = GenerateRequest("completion", SamplingParams(**params), prompt="the red", extra=extra)
    return plan_request(tensors, request, "the red", default_max_tokens=16)


def refusal(tensors: str, extra: dict[str, Any]) -> ClientError:
    with pytest.raises(ClientError) as caught:
        plan(tensors, extra)
    assert caught.value.status == 400 and caught.value.code == "invalid_value"
    return caught.value


def test_every_field_a_convention_passes_on_has_a_kind() -> None:
    mapped = set().union(*_MAPPED_EXTRAS.values())
    assert mapped <= set(EXTRA_KINDS), mapped - set(EXTRA_KINDS)


WRONG = {
    "bad_words": [5, 0, True, {}, {"a": "b"}, ["ok", 3], [["x"]]],
    "repetition_penalty": ["abc", {}, True, [1.2], math.nan, math.inf, -math.inf, 10**400],
    "length_penalty": ["1", False],
    "min_tokens": [1.5, 2.0, "3", True, [2]],
}
MESSAGES = {
    "bad_words": "bad_words must be a string or a list of strings, got ",
    "repetition_penalty": "repetition_penalty must be a finite number, got ",
    "length_penalty": "length_penalty must be a finite number, got ",
    "min_tokens": "min_tokens must be an integer, got ",
}


CASES = [
    (tensors, name, value)
    for tensors in ("trtllm", "vllm")
    for name, values in WRONG.items()
    if name in _MAPPED_EXTRAS[tensors]
    for value in values
]


@pytest.mark.parametrize(("tensors", "name", "value"), CASES)
def test_a_value_of_the_wrong_type_is_a_400_naming_its_field(tensors: str, name: str, value: Any) -> None:
    error = refusal(tensors, {name: value})
    assert error.param == name
    assert error.message.startswith(MESSAGES[name]), error.message
    assert len(error.message) < 100  # the value in a few words, never all of it


def test_vllm_only_fields_are_checked_too() -> None:
    assert refusal("vllm", {"skip_special_tokens": "no"}).message == (
        "skip_special_tokens must be true or false, got a string"
    )
    assert refusal("vllm", {"include_stop_str_in_output": 1}).param == "include_stop_str_in_output"
    assert refusal("vllm", {"stop_token_ids": [1, "2"]}).message.startswith("stop_token_ids must be a list")
    assert refusal("vllm", {"stop_token_ids": 2}).param == "stop_token_ids"
    assert refusal("vllm", {"stop_token_ids": [2**40]}).message == (
        "stop_token_ids must fit a 32-bit integer, got 1099511627776"
    )
    assert refusal("vllm", {"min_p": True}).param == "min_p"


def test_values_of_the_right_type_pass_and_null_is_unset() -> None:
    fields = plan(
        "trtllm",
        {
            "bad_words": "8",
            "repetition_penalty": 1.2,
            "length_penalty": 2,
            "min_tokens": 0,
            "presence_penalty": None,
        },
    ).fields
    assert fields["bad_words"] == ["8"] and fields["repetition_penalty"] == 1.2
    assert fields["length_penalty"] == 2 and "presence_penalty" not in fields
    assert plan("trtllm", {"min_tokens": 3}).fields["min_tokens"] == 3
    assert "bad_words" not in plan("trtllm", {"bad_words": ""}).fields  # no words: nothing to send
    assert "bad_words" not in plan("trtllm", {"bad_words": []}).fields
    assert "length_penalty" not in plan("trtllm", {"length_penalty": None}).fields
    extra = {
        "bad_words": "8",
        "stop_token_ids": [2],
        "skip_special_tokens": False,
        "min_p": 0.1,
        "min_tokens": None,
    }
    sampling = json.loads(plan("vllm", extra).fields["sampling_parameters"])
    assert sampling == {
        "max_tokens": 16,
        "bad_words": ["8"],  # one string as a list, as for TensorRT-LLM
        "stop_token_ids": [2],
        "skip_special_tokens": False,
        "min_p": 0.1,
    }


PENALTIES = ModelFacts(
    "penalties",
    batched=True,
    inputs={
        "text_input": "BYTES",
        "max_tokens": "INT32",
        "stop_words": "BOOL",  # a model that declares an input oddly: the 400 names the request's field
        "repetition_penalty": "FP32",
        "length_penalty": "INT32",
        "min_tokens": "UINT8",
        "presence_penalty": "FP16",
        "exclude_input_in_output": "BOOL",
    },
)


def test_each_input_is_checked_against_the_models_declared_datatype() -> None:
    def refused(extra: dict[str, Any], **params: Any) -> ClientError:
        with pytest.raises(ClientError) as caught:
            plan("trtllm", extra, **params).inputs_for(PENALTIES, stream=False)
        return caught.value

    sent = plan("trtllm", {"repetition_penalty": 2, "length_penalty": 3, "min_tokens": 255}).inputs_for(
        PENALTIES, stream=False
    )
    assert (sent["repetition_penalty"], sent["length_penalty"], sent["min_tokens"]) == (2, 3, 255)
    big = refused({"repetition_penalty": 1e39})
    assert big.param == "repetition_penalty"
    takes = "Triton model 'penalties' takes repetition_penalty as FP32"
    assert big.message == f"repetition_penalty must fit FP32 ({takes}), got 1e+39"
    assert refused({"presence_penalty": 70000.0}).message.startswith("presence_penalty must fit FP16")
    assert refused({"length_penalty": 1.5}).message.startswith(
        "length_penalty must be an integer (Triton model 'penalties' takes length_penalty as INT32)"
    )
    assert refused({"min_tokens": 256}).message.startswith("min_tokens must fit UINT8")
    stop = refused({}, stop=("x",))
    assert stop.param == "stop" and stop.message.startswith("stop must be true or false")


@pytest.mark.parametrize(
    ("datatype", "good", "bad"),
    [
        ("BOOL", [True, False, [True]], [1, 0, "true", None, 1.0]),
        ("INT32", [0, -(2**31), 2**31 - 1, [1, 2]], [2**31, 1.0, True, "1", [1, "2"]]),
        ("UINT64", [0, 2**64 - 1], [-1, 2**64, False]),
        ("INT8", [127, -128], [128, -129]),
        ("FP32", [0, 1.5, -2, 3.4e38], [3.5e38, math.nan, math.inf, True, "1.5", {}, 10**400]),
        ("FP64", [1e300, 10**300], [math.inf, 10**400]),
        ("BYTES", ["x", "", ["a", "b"], []], [5, True, 1.5, ["a", 5], {}, None]),
    ],
)
def test_check_input_by_datatype(datatype: str, good: list[Any], bad: list[Any]) -> None:
    for value in good:
        check_input("x", value, datatype, param="x", model="m")
        # what passes becomes a gRPC tensor without error (HTTP sends the same JSON value)
        array = to_array(value, datatype, True, triton_to_np_dtype(datatype))
        assert array.shape[0] == 1
        if datatype != "BYTES" and not isinstance(value, list):
            assert array.item() == np.array(value, dtype=triton_to_np_dtype(datatype)).item()
    for value in bad:
        with pytest.raises(ClientError) as caught:
            check_input("x", value, datatype, param="field", model="m")
        assert caught.value.param == "field" and caught.value.status == 400


def test_a_datatype_not_known_here_is_sent_unchecked() -> None:
    check_input("x", "anything", "TYPE_CUSTOM", param="x", model="m")
