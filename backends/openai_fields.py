"""Which extra OpenAI request fields an engine that does not speak OpenAI can honour.

On the request path, in the adapters that translate an OpenAI request into another
protocol (``backends/embedded.py``, ``backends/triton.py``): the gateway passes fields it
does not model itself in ``GenerateRequest.extra``; an adapter accepts the ones that cannot
change the answer, the ones at their neutral value, and the ones its engine can express
(``mapped``); anything else is a 400 rather than being silently dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from backends.logprobs import MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS
from serving.errors import ClientError

# Accepted and ignored everywhere: they do not change what is generated (prompt_cache_key and
# safety_identifier: OpenAI's cache-routing hint and its successor to ``user``).
IGNORED_FIELDS = frozenset(
    {
        "store",
        "metadata",
        "service_tier",
        "parallel_tool_calls",
        "user",
        "prompt_cache_key",
        "safety_identifier",
    }
)
# OpenAI's own fields, accepted only at their neutral value unless the engine maps them; any
# other value is "not supported by <engine>", not mistaken for a typo.
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "suffix": (None, ""),  # insertion: the answer would have to end before it
    "response_format": (None, {"type": "text"}),
    "functions": (None, []),
    "function_call": (None, "none"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logprobs": (False, None),
    "top_logprobs": (0, None),
    "echo": (False, None),
    "best_of": (1, None),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "logit_bias": (None, {}),
    # vLLM's sampling extensions, which clients built for vLLM send at their defaults.
    "repetition_penalty": (1, 1.0, None),
    "min_tokens": (0, None),
    "min_p": (0, 0.0, None),
    "skip_special_tokens": (True, None),  # the embedded engine never shows special tokens
    "spaces_between_special_tokens": (True, None),
    "include_stop_str_in_output": (False, None),
    "use_beam_search": (False, None),
}


def check_extra(extra: dict[str, Any], engine: str, mapped: Collection[str] = ()) -> dict[str, Any]:
    """The fields of ``extra`` to pass to the engine (those in ``mapped``, not at a neutral value).

    Raises a 400 for an unknown field (OpenAI's wording) and for a known one the engine cannot
    express (``'<name>' is not supported by <engine>``).
    """
    passed: dict[str, Any] = {}
    for name, value in extra.items():
        if name in IGNORED_FIELDS:
            continue
        neutral = NEUTRAL_VALUES.get(name)
        if neutral is not None and _is_neutral(value, neutral):
            continue
        if name in mapped:
            passed[name] = value
            continue
        if neutral is None:
            raise ClientError(
                f"Unrecognized request argument supplied: {name}", param=name, code="unknown_field"
            )
        raise ClientError(f"'{name}' is not supported by {engine}", param=name, code="unsupported_value")
    return passed


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    """Equal to a neutral value of the same kind: ``logprobs: 0`` (ask for the sampled token's
    logprob) is not ``logprobs: false``, although ``0 == False`` in Python."""
    return any(value == n and isinstance(value, bool) == isinstance(n, bool) for n in neutral)


@dataclass(frozen=True, slots=True)
class LogprobOptions:
    """What a request asks for: ``top`` alternatives per token (None: no logprobs) and ``echo``."""

    top: int | None = None
    echo: bool = False


def _integer(extra: dict[str, Any], name: str, high: int) -> int | None:
    value = extra.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise ClientError(
            f"{name} must be an integer from 0 to {high}, got {value!r}", param=name, code="invalid_value"
        )
    return value


def _flag(extra: dict[str, Any], name: str) -> bool:
    value = extra.get(name)
    if value is not None and not isinstance(value, bool):
        raise ClientError(f"{name} must be true or false, got {value!r}", param=name, code="invalid_value")
    return value is True


def logprob_options(kind: str, extra: dict[str, Any]) -> tuple[LogprobOptions, dict[str, Any]]:
    """Validate the logprob fields of ``extra`` and take them out; returns them and the rest.

    ``/v1/completions``: ``logprobs`` 0..5 (alternatives per token), ``echo`` (the prompt, and
    its tokens' logprobs, come first). ``/v1/chat/completions``: ``logprobs`` true/false and
    ``top_logprobs`` 0..20, which needs ``logprobs: true`` (as OpenAI and vLLM say). Bad values
    are a 400 naming the field.
    """
    rest = dict(extra)
    if kind == "chat":
        wanted = _flag(extra, "logprobs")
        top = _integer(extra, "top_logprobs", MAX_TOP_LOGPROBS)
        if top is not None and not wanted:
            raise ClientError(
                "top_logprobs needs logprobs set to true", param="top_logprobs", code="invalid_value"
            )
        rest.pop("logprobs", None)
        rest.pop("top_logprobs", None)
        return LogprobOptions(top=(top or 0) if wanted else None), rest
    top = _integer(extra, "logprobs", MAX_COMPLETION_LOGPROBS)
    echo = _flag(extra, "echo")
    rest.pop("logprobs", None)
    rest.pop("echo", None)
    return LogprobOptions(top=top, echo=echo), rest
