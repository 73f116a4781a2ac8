"""The generate request body carries the gateway's request id as Triton's own ``id``.

Over gRPC the id went along; over HTTP generate it did not, and Triton logged every request as
``[request id: <id_unknown>]`` (QA). The generate extension reads ``id`` (checked against the real
tritonserver: its log names the request and its answer echoes it)."""

from __future__ import annotations

import orjson

from backends.triton_http import _body
from backends.triton_tensors import ModelFacts


def test_the_request_id_goes_as_id_beside_the_inputs() -> None:
    inputs = {"text_input": "12+34=", "max_tokens": 3}
    facts = ModelFacts("m", inputs={"text_input": "BYTES", "max_tokens": "INT32"})
    assert orjson.loads(_body(facts, inputs, "req-1")) == {
        "id": "req-1",
        "text_input": "12+34=",
        "max_tokens": 3,
    }
    assert orjson.loads(_body(facts, inputs, "")) == inputs  # none to give


def test_a_model_with_an_input_named_id_gets_no_request_id() -> None:
    """Triton reads ``id`` as the request's id and as that input: a string there was its 500."""
    inputs = {"text_input": "12+34=", "id": 7}
    facts = ModelFacts("m", inputs={"text_input": "BYTES", "id": "INT32"})
    assert orjson.loads(_body(facts, inputs, "req-1")) == inputs
