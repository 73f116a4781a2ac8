"""What a route spec's validation error says to an operator (pure; no I/O).

Used where route specs are read from people: the admin API (``PUT /admin/routes/{name}``) and
``turnout routes`` (a ``--file``, or an edit that would make an invalid spec). pydantic's words
are kept except where they name its own types or hide the likely typo: an unknown field names
the nearest known one, and a wrong container says what it must be.
"""

from __future__ import annotations

from pydantic_core import ErrorDetails

from deploy.field_errors import plain_reason
from serving.routing.spec import RouteSpec


def field_message(error: ErrorDetails) -> str:
    """One error's reason, without its place (``shadows.0.rate``: the caller names it)."""
    return plain_reason(error, RouteSpec, mapping="an object", noun="field")
