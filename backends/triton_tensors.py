"""Triton's tensor conventions: an OpenAI-shaped request → input tensors, output tensors → text.

Pure (no I/O), on the request path inside ``backends/triton.py``: it decides *what* to send
to a Triton model and how to read its answers; ``triton_http.py`` / ``triton_grpc.py`` carry
it. Three conventions (``TritonSettings.tensors``):

* ``turnout`` — the shipped repository: ``text_input``, ``max_tokens``, ``temperature``,
  ``top_p``, ``top_k``, ``seed``, ``stop``, ``ignore_eos``, ``stream`` → ``text_output``,
  ``finish_reason``, ``prompt_tokens``, ``completion_tokens``;
* ``trtllm`` — TensorRT-LLM's ensemble: ``text_input``, ``max_tokens``, ``stop_words``,
  ``bad_words``, ``end_id``, ``pad_id``, sampling inputs, ``stream``,
  ``exclude_input_in_output`` → ``text_output``, ``num_input_tokens``, ``num_output_tokens``;
* ``vllm`` — Triton's vLLM backend: ``text_input``, ``stream``, ``sampling_parameters``
  (JSON), ``exclude_input_in_output`` → ``text_output`` (+ finish reason and counts when asked).

Only inputs the model declares are sent (its config is read once); a request that needs one
it lacks is a 400, and so is a value of the wrong type for its field or for the input's declared
datatype (``triton_types.py``), checked here before either transport sees it, so HTTP and gRPC
refuse the same values. Stop strings are also applied here, because TensorRT-LLM matches stop
*tokens* and keeps them in the output, where OpenAI cuts before the string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backends.base import GenerateRequest, Usage
from backends.openai_fields import check_extra
from backends.stop_scanner import StopScanner
from backends.triton_types import check_extras, check_input
from serving.errors import BackendError, BackendTimeout, BackendUnavailable, ClientError, TurnoutError

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# Extra OpenAI (or engine-specific) request fields each convention can carry.
_MAPPED_EXTRAS = {
    "turnout": frozenset[str](),
    "trtllm": frozenset(
        {"bad_words", "repetition_penalty", "presence_penalty", "frequency_penalty", "min_tokens"}
        | {"length_penalty"}
    ),
    "vllm": frozenset(
        {"presence_penalty", "frequency_penalty", "repetition_penalty", "min_p", "min_tokens"}
        | {"stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "bad_words"}
        | {"spaces_between_special_tokens"}
    ),
}
# Inputs sent only when the model declares them; without them the answer is still right.
_OPTIONAL_INPUTS = frozenset(
    {"stream", "exclude_input_in_output", "end_id", "pad_id", "return_finish_reason"}
    | {"return_num_input_tokens", "return_num_output_tokens"}
)


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What a model's config says: decoupled or not, batch dimension, inputs and their types."""

    name: str
    decoupled: bool = False
    batched: bool = False
    inputs: Mapping[str, str] = field(default_factory=dict)  # name → Triton datatype (INT32, BYTES…)

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> ModelFacts:
        """From ``GET /v2/models/{name}/config`` (or gRPC's config as JSON)."""
        policy = config.get("model_transaction_policy") or {}
        inputs = {}
        for spec in config.get("input") or ():
            datatype = str(spec.get("data_type", "TYPE_STRING")).removeprefix("TYPE_")
            inputs[str(spec["name"])] = "BYTES" if datatype == "STRING" else datatype
        return cls(name, bool(policy.get("decoupled")), int(config.get("max_batch_size") or 0) > 0, inputs)


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request in a convention's terms, before it meets a model's declared inputs."""

    tensors: str
    fields: dict[str, Any]  # input name → str | int | float | bool | list[str]
    max_tokens: int
    stop: tuple[str, ...]
    prompt: str
    params: dict[str, str] = field(default_factory=dict)  # input name → the OpenAI field it came from

    def inputs_for(self, facts: ModelFacts, stream: bool) -> dict[str, Any]:
        """The inputs to send to ``facts``' model (``stream`` says whether to ask it to stream)."""
        fields = {**self.fields, "stream": stream}
        if not facts.inputs:  # nothing known about the model: send everything
            return fields
        sent = {}
        for name, value in fields.items():
            if name in facts.inputs:
                if name not in _OPTIONAL_INPUTS:  # from the request (the rest are the gateway's own)
                    param = self.params.get(name, name)
                    check_input(name, value, facts.inputs[name], param=param, model=facts.name)
                sent[name] = value
            elif name not in _OPTIONAL_INPUTS and name != "text_input":
                param = self.params.get(name, name)
                raise ClientError(
                    f"'{param}' is not supported by Triton model '{facts.name}' (it has no {name} input)",
                    param=param,
                    code="unsupported_value",
                )
        for flag in ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"):
            if flag in facts.inputs:
                sent[flag] = True
        return sent

    @property
    def echo(self) -> str:
        """The prompt, where the model might put it before the answer (no exclude_input_in_output)."""
        return self.prompt if self.tensors in ("trtllm", "vllm") else ""


def _engine(tensors: str) -> str:
    """How a 400 names what cannot take a field."""
    return f"Triton models with {tensors} tensors"


def plan_request(
    tensors: str,
    request: GenerateRequest,
    prompt: str,
    *,
    default_max_tokens: int,
    end_id: int | None = None,
    pad_id: int | None = None,
) -> RequestPlan:
    """Map ``request`` onto ``tensors``; a 400 for what the convention cannot express."""
    p = request.params
    extras = check_extra(request.extra, _engine(tensors), _MAPPED_EXTRAS[tensors]) if request.extra else {}
    extras = check_extras(extras)  # each of the type it must be, before it can become a tensor
    if p.max_tokens is not None:
        max_tokens = p.max_tokens
    else:
        max_tokens = COMPLETION_DEFAULT_MAX_TOKENS if request.kind == "completion" else default_max_tokens
    sampling: dict[str, Any] = {"max_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k", "seed"):
        if getattr(p, name) is not None:
            sampling[name] = getattr(p, name)
    if tensors == "vllm":
        if p.stop:
            sampling["stop"] = list(p.stop)
        if p.ignore_eos:
            sampling["ignore_eos"] = True
        sampling.update(extras)
        fields = {
            "text_input": prompt,
            "sampling_parameters": json.dumps(sampling),
            "exclude_input_in_output": True,
        }
        return RequestPlan(tensors, fields, max_tokens, p.stop, prompt)
    params = {"stop_words": "stop", "stop": "stop"}
    if p.seed is not None:  # a UINT64 tensor in both conventions: a negative seed is folded in
        sampling["seed"] = p.seed % 2**64
    fields = {"text_input": prompt, **sampling}
    if tensors == "turnout":
        if p.stop:
            fields["stop"] = list(p.stop)
        if p.ignore_eos:
            fields["ignore_eos"] = True
        return RequestPlan(tensors, fields, max_tokens, p.stop, prompt, params)
    if p.ignore_eos:
        raise ClientError(f"'ignore_eos' is not supported by {_engine(tensors)}", param="ignore_eos")
    if p.stop:
        fields["stop_words"] = list(p.stop)
    bad = extras.pop("bad_words", None)  # a list of strings by now
    if bad:
        fields["bad_words"] = bad
    fields.update(extras)
    fields["exclude_input_in_output"] = True
    if end_id is not None:
        fields["end_id"] = end_id
    if pad_id is not None:
        fields["pad_id"] = pad_id
    return RequestPlan(tensors, fields, max_tokens, p.stop, prompt, params)


# Where each convention reports token counts: the shipped models, TensorRT-LLM and vLLM backends.
_PROMPT_COUNTS = ("prompt_tokens", "num_input_tokens")
_COMPLETION_COUNTS = ("completion_tokens", "num_output_tokens")


class ResponseReader:
    """Turns a model's successive output tensors into new text, then a finish reason and usage."""

    def __init__(self, plan: RequestPlan, cumulative: bool, echo: str = "") -> None:
        self.plan = plan
        self.cumulative = cumulative
        self._echo = echo  # stripped from the front of the text if the model repeats the prompt
        self._seen = ""  # cumulative mode: all text so far
        self._scanner = StopScanner(plan.stop)
        self._first = True
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    @property
    def stopped(self) -> bool:
        return self._scanner.stopped

    @property
    def stop_reason(self) -> str | None:
        """The stop string that ended the answer (vLLM's ``stop_reason``), if one did."""
        return self._scanner.matched

    def feed(self, outputs: Mapping[str, Any]) -> str:
        """The new text of one response (stop strings cut, prompt echo removed)."""
        text = as_text(outputs.get("text_output"))
        if self.cumulative:
            if self._echo and text.startswith(self._echo):
                text = text[len(self._echo) :]
            if not text.startswith(self._seen):
                raise BackendError("a cumulative stream sent text that does not extend what it sent before")
            text, self._seen = text[len(self._seen) :], text
        elif self._first and self._echo and text.startswith(self._echo):
            text = text[len(self._echo) :]
        if text:
            self._first = False
        reason = as_text(outputs.get("finish_reason"))
        self.finish_reason = reason or self.finish_reason
        for key in _PROMPT_COUNTS:
            if key in outputs:
                self.prompt_tokens = _first_int(outputs[key], self.prompt_tokens)
        for key in _COMPLETION_COUNTS:
            if key in outputs:
                self.completion_tokens = _first_int(outputs[key], self.completion_tokens)
        return self._scanner.feed(text)

    def finish(self) -> tuple[str, str, Usage]:
        """(held-back text, finish reason, usage) once the model has sent its last response."""
        tail = self._scanner.flush()
        usage = Usage(self.prompt_tokens or 0, self.completion_tokens or 0)
        if self._scanner.stopped:
            return tail, "stop", usage
        if self.finish_reason in ("stop", "length"):
            return tail, self.finish_reason, usage
        if self.completion_tokens is not None and self.completion_tokens >= self.plan.max_tokens:
            return tail, "length", usage
        return tail, "stop", usage


def as_text(value: Any) -> str:
    """A BYTES output as text: a string, bytes, or a (nested) list of them joined."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list | tuple):
        return "".join(as_text(v) for v in value)
    return str(value)


def as_int(value: Any) -> int | None:
    """A count output: a number or the first number of a (nested) list."""
    while isinstance(value, list | tuple):
        if not value:
            return None
        value = value[0]
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _first_int(value: Any, default: int | None) -> int | None:
    found = as_int(value)
    return default if found is None else found


def status_error(name: str, status: int, message: str) -> TurnoutError:
    """A Triton HTTP error status → the gateway's typed error, with Triton's message."""
    detail = message or f"Triton answered {status}"
    if status == 404:  # no such model (or not loaded): this variant cannot serve, not the client's fault
        return BackendUnavailable(f"Triton variant {name}: {detail}")
    if 400 <= status < 500:
        return ClientError(detail, code="triton_rejected")
    if status == 503:
        return BackendUnavailable(f"Triton variant {name}: {detail}")
    if status == 504:
        return BackendTimeout(f"Triton variant {name}: {detail}")
    return BackendError(f"Triton variant {name} answered {status}: {detail}")
