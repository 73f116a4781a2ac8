"""Which extra OpenAI request fields an engine that does not speak OpenAI can honour.

On the request path, in the adapters that translate an OpenAI request into another
protocol (``backends/embedded.py``, ``backends/triton.py``): the gateway passes fields it
does not model itself in ``GenerateRequest.extra``; an adapter accepts the ones that cannot
change the answer, the ones at their neutral value, and the ones its engine can express
(``mapped``); anything else is a 400 rather than being silently dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from serving.errors import ClientError

# Accepted and ignored everywhere: they do not change what is generated.
IGNORED_FIELDS = frozenset({"store", "metadata", "service_tier", "parallel_tool_calls", "suffix"})
# Accepted only at their neutral value unless the engine maps them.
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logprobs": (False, None),
    "top_logprobs": (0, None),
    "echo": (False, None),
    "best_of": (1, None),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "logit_bias": (None, {}),
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
        if neutral is not None and value in neutral:
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
