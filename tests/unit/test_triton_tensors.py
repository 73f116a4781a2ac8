"""The Triton adapter's pure parts: tensor conventions, response reading, errors, settings, presets."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import pytest

from backends.base import GenerateRequest, SamplingParams
from backends.registry import build_backend
from backends.settings import OpenAIHttpSettings, TritonSettings
from backends.triton import TritonBackend
from backends.triton_grpc import grpc_error, guess_datatype, to_array
from backends.triton_tensors import ModelFacts, ResponseReader, plan_request, status_error
from deploy.model import tasks
from serving.config import parse_config
from serving.errors import BackendError, BackendTimeout, BackendUnavailable, ClientError, ConfigError

TRTLLM = ModelFacts(  # as deploy/triton_repo/models/ensemble declares them (the checked ones must match)
    "ensemble",
    batched=True,
    inputs={"text_input": "BYTES", "max_tokens": "INT32", "bad_words": "BYTES", "stop_words": "BYTES"}
    | {"exclude_input_in_output": "BOOL", "end_id": "INT32", "temperature": "FP32"}
    | {"return_num_output_tokens": "BOOL", "stream": "BOOL"},
)


def completion(prompt: str = "03+45=", extra: dict[str, Any] | None = None, **params: Any) -> GenerateRequest:
    return GenerateRequest("completion", SamplingParams(**params), prompt=prompt, extra=extra or {})


def plan(tensors: str, request: GenerateRequest, **kw: Any) -> Any:
    return plan_request(tensors, request, request.prompt or "", default_max_tokens=256, **kw)


def test_model_facts_from_http_and_grpc_configs() -> None:
    http = {
        "max_batch_size": 16,
        "model_transaction_policy": {"decoupled": True},
        "input": [
            {"name": "text_input", "data_type": "TYPE_STRING"},
            {"name": "seed", "data_type": "TYPE_UINT64"},
        ],
    }
    facts = ModelFacts.from_config("m", http)
    assert facts.decoupled and facts.batched and facts.inputs == {"text_input": "BYTES", "seed": "UINT64"}
    grpc = {"input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": ["1"]}]}  # proto3 drops 0s
    facts = ModelFacts.from_config("v", grpc)
    assert not facts.decoupled and not facts.batched


def test_turnout_convention_sends_the_named_tensors() -> None:
    ask = plan(
        "turnout", completion(max_tokens=8, temperature=0.5, top_k=3, seed=7, stop=("x",), ignore_eos=True)
    )
    assert ask.fields == {
        "text_input": "03+45=",
        "max_tokens": 8,
        "temperature": 0.5,
        "top_k": 3,
        "seed": 7,
        "stop": ["x"],
        "ignore_eos": True,
    }
    assert plan("turnout", completion()).max_tokens == 16  # OpenAI's completion default
    assert plan("turnout", completion(temperature=1.0, seed=-1)).fields["seed"] == 2**64 - 1  # UINT64
    chat = GenerateRequest("chat", SamplingParams(), messages=[])
    assert plan_request("turnout", chat, "p", default_max_tokens=99).max_tokens == 99
    with pytest.raises(ClientError, match="Unrecognized request argument supplied: bad_words"):
        plan("turnout", completion(extra={"bad_words": ["8"]}))
    assert (
        plan("turnout", completion(extra={"presence_penalty": 0, "store": True})).fields["max_tokens"] == 16
    )


def test_trtllm_convention() -> None:
    ask = plan(
        "trtllm",
        completion(
            max_tokens=4, temperature=0.0, stop=("4",), extra={"bad_words": "8", "frequency_penalty": 0}
        ),
        end_id=2,
        pad_id=0,
    )
    assert ask.fields == {
        "text_input": "03+45=",
        "max_tokens": 4,
        "temperature": 0.0,
        "stop_words": ["4"],
        "bad_words": ["8"],
        "exclude_input_in_output": True,
        "end_id": 2,
        "pad_id": 0,
    }
    sent = ask.inputs_for(TRTLLM, stream=True)
    assert "pad_id" not in sent  # an optional input the model does not declare is left out
    assert sent["stream"] is True and sent["return_num_output_tokens"] is True
    with pytest.raises(ClientError, match="'top_p' is not supported by Triton model 'ensemble'"):
        plan("trtllm", completion(top_p=0.5)).inputs_for(TRTLLM, stream=False)
    with pytest.raises(ClientError, match="ignore_eos"):
        plan("trtllm", completion(ignore_eos=True))
    with pytest.raises(ClientError, match="'logprobs' is not supported by Triton models with trtllm tensors"):
        plan("trtllm", completion(extra={"logprobs": 1}))
    everything = plan("trtllm", completion(top_p=0.5)).inputs_for(ModelFacts("unknown"), stream=False)
    assert everything["top_p"] == 0.5 and everything["stream"] is False  # nothing known: all sent


def test_vllm_convention_packs_sampling_parameters() -> None:
    ask = plan(
        "vllm",
        completion(
            max_tokens=8, temperature=0, seed=3, stop=("a", "b"), extra={"min_p": 0.1, "logprobs": None}
        ),
    )
    assert set(ask.fields) == {"text_input", "sampling_parameters", "exclude_input_in_output"}
    params = json.loads(ask.fields["sampling_parameters"])
    assert params == {"max_tokens": 8, "temperature": 0, "seed": 3, "stop": ["a", "b"], "min_p": 0.1}
    with pytest.raises(ClientError, match="'tools' is not supported"):
        plan("vllm", completion(extra={"tools": [{"type": "function"}]}))


def _reader(
    tensors: str = "turnout", cumulative: bool = False, echo: str = "", **params: Any
) -> ResponseReader:
    return ResponseReader(plan(tensors, completion(**params)), cumulative=cumulative, echo=echo)


def test_reader_deltas_usage_and_finish() -> None:
    reader = _reader(max_tokens=8)
    assert [reader.feed({"text_output": t}) for t in ("8", "4", "0")] == ["8", "4", "0"]
    assert reader.feed({"text_output": [b""], "finish_reason": ["stop"], "prompt_tokens": [[7]]}) == ""
    reader.feed({"completion_tokens": 3})
    tail, finish, usage = reader.finish()
    assert (tail, finish, usage.prompt_tokens, usage.completion_tokens) == ("", "stop", 7, 3)


def test_reader_infers_length_from_the_token_count() -> None:
    reader = _reader("trtllm", max_tokens=2)
    reader.feed({"text_output": "64", "num_input_tokens": 7, "num_output_tokens": 2})
    assert reader.finish()[1] == "length"
    short = _reader("trtllm", max_tokens=8)
    short.feed({"text_output": "840", "num_output_tokens": 3})
    assert short.finish()[1] == "stop"


def test_reader_cuts_stop_strings_across_pieces() -> None:
    reader = _reader("trtllm", max_tokens=20, stop=("bird",))
    out = [reader.feed({"text_output": t}) for t in (" new", " white", " bi", "rd", " hides")]
    assert "".join(out) == " new white " and reader.stopped
    assert reader.finish()[:2] == ("", "stop") and reader.stop_reason == "bird"


def test_reader_cumulative_text_and_prompt_echo() -> None:
    reader = _reader("vllm", cumulative=True, echo="03+45=")
    pieces = [reader.feed({"text_output": t}) for t in ("03+45=8", "03+45=84", "03+45=840")]
    assert pieces == ["8", "4", "0"]
    with pytest.raises(BackendError, match="cumulative"):
        reader.feed({"text_output": "03+45=9"})
    delta = _reader("trtllm", echo="03+45=")
    assert delta.feed({"text_output": "03+45=840"}) == "840"


def test_status_errors() -> None:
    assert isinstance(status_error("v", 404, "no model"), BackendUnavailable)
    refused = status_error("v", 400, "bad_words is not supported")
    assert type(refused) is ClientError and refused.message == "bad_words is not supported"
    assert isinstance(status_error("v", 503, "x"), BackendUnavailable)
    assert isinstance(status_error("v", 504, "x"), BackendTimeout)
    assert type(status_error("v", 500, "x")) is BackendError
    assert isinstance(grpc_error("v", "StatusCode.UNAVAILABLE", "down"), BackendUnavailable)
    assert isinstance(grpc_error("v", "StatusCode.DEADLINE_EXCEEDED", "slow"), BackendTimeout)
    assert type(grpc_error("v", "StatusCode.INTERNAL", "temperature must be >= 0")) is ClientError
    assert type(grpc_error("v", None, "refused in a stream")) is ClientError
    # A stream error has no status: the model gone from Triton is the variant down, not the client.
    unloaded = "Request for unknown model: 'turnout_tiny_vllm' has no available versions"
    assert isinstance(grpc_error("v", None, unloaded), BackendUnavailable)


def test_grpc_tensors_follow_the_declared_types_and_batch_dimension() -> None:
    batched = to_array(["a", "b"], "BYTES", True, np.object_)
    assert batched.shape == (1, 2) and batched.tolist() == [[b"a", b"b"]]
    flat = to_array(7, "UINT64", False, np.uint64)
    assert flat.shape == (1,) and flat.dtype == np.uint64
    with pytest.raises(ClientError, match="3000000000 does not fit the model's INT32 input"):
        to_array(3_000_000_000, "INT32", True, np.int32)
    assert [
        guess_datatype(n, v) for n, v in (("x", "s"), ("x", True), ("seed", 1), ("x", 1), ("x", 0.5))
    ] == [
        "BYTES",
        "BOOL",
        "UINT64",
        "INT32",
        "FP32",
    ]


def test_presets_fill_fields_the_variant_does_not_set() -> None:
    ensemble = TritonSettings.model_validate({"preset": "trtllm-ensemble", "url": "http://h:8000"})
    assert (ensemble.tensors, ensemble.engine, ensemble.model, ensemble.vendor) == (
        "trtllm",
        "triton-trtllm",
        "ensemble",
        "nvidia",
    )
    own = TritonSettings.model_validate({"preset": "trtllm-ensemble", "url": "http://h:8000", "model": "e2"})
    assert own.model == "e2"
    serve = OpenAIHttpSettings.model_validate(
        {"preset": "trtllm-serve", "base_url": "http://h/v1", "model": "m"}
    )
    assert (serve.engine, serve.vendor) == ("trtllm-serve", "nvidia")
    rocm = OpenAIHttpSettings.model_validate({"preset": "vllm-rocm", "base_url": "http://h/v1", "model": "m"})
    assert (rocm.engine, rocm.vendor) == ("vllm", "amd")
    with pytest.raises(ValueError, match="unknown preset 'tensorrt'"):
        TritonSettings.model_validate({"preset": "tensorrt", "url": "http://h:8000"})


def test_config_errors_name_the_yaml_path() -> None:
    bad = {
        "variants": {"t": {"kind": "triton", "model": "m", "protocol": "grpc", "url": "http://h:1"}},
        "routes": {"r": {"targets": [{"variant": "t"}]}},
    }
    with pytest.raises(ConfigError, match=r"variants\.t: grpc_url: protocol grpc needs grpc_url"):
        parse_config(bad)
    bad["variants"]["t"] = {"kind": "triton", "model": "m", "url": "http://h:1", "tensors": "onnx"}
    with pytest.raises(ConfigError, match=r"variants\.t\.tensors: "):
        parse_config(bad)


def test_grpc_without_tritonclient_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tritonclient.grpc.aio", None)
    settings = TritonSettings(model="m", protocol="grpc", grpc_url="127.0.0.1:8001")
    with pytest.raises(ConfigError, match=r"pip install 'turnout\[triton\]'"):
        build_backend("t", settings)


def test_chats_are_rendered_with_the_models_template_minus_bos() -> None:
    backend = TritonBackend("t", TritonSettings(model="m", url="http://127.0.0.1:1"))
    messages = [{"role": "user", "content": "03+45="}]
    chat = GenerateRequest("chat", SamplingParams(), messages=messages)
    expected = tasks.chat_document(3, 45).prompt  # "<s><|user|>03+45=</s><|assistant|>"
    assert backend.prompt(chat) == expected.removeprefix(tasks.BOS_TOKEN)
    keep = TritonBackend("t", TritonSettings(model="m", url="http://127.0.0.1:1", server_adds_bos=False))
    assert keep.prompt(chat) == expected
    assert backend.info.kind == "triton" and not backend.ready()


def test_an_integer_extra_past_int32_is_refused_before_it_becomes_a_tensor() -> None:
    with pytest.raises(ClientError, match="min_tokens must fit a 32-bit integer") as caught:
        plan("trtllm", completion(extra={"min_tokens": 3_000_000_000}))
    assert caught.value.param == "min_tokens"
    assert plan("trtllm", completion(extra={"min_tokens": 2})).fields["min_tokens"] == 2
