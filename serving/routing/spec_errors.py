"""What a route spec's validation error says to an operator (pure; no I/O).

Used where route specs are read from people: the admin API (``PUT /admin/routes/{name}``) and
``turnout routes`` (a ``--file``, or an edit that would make an invalid spec). pydantic's words
are kept except where they name its own types or hide the likely typo: an unknown field names
the nearest known one, and a wrong container says what it must be.
"""

from __future__ import annotations

from pydantic_core import ErrorDetails

from deploy.unknown_keys import unknown_key_message
from serving.routing.spec import RouteSpec

_CONTAINERS = {"model_type": "an object", "dict_type": "an object", "list_type": "a list"}


def field_message(error: ErrorDetails) -> str:
    """One error's reason, without its place (``shadows.0.rate``: the caller names it)."""
    if error["type"] == "extra_forbidden":  # most often a typo: `rate` for `sample_rate`
        return unknown_key_message(RouteSpec, error["loc"], noun="field")
    if error["type"] in _CONTAINERS:  # pydantic: "a valid dictionary or instance of RouteSpec"
        return f"must be {_CONTAINERS[error['type']]}"
    return str(error["msg"]).removeprefix("Value error, ")
