"""Server-sent-event framing: the only code that writes ``data: …\\n\\n``.

The API layer turns typed backend chunks into OpenAI stream objects and hands them
here; an error after the first byte becomes one typed ``error`` event followed by
``[DONE]`` so that a client never hangs.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def error_event(body: dict[str, Any]) -> bytes:
    """``body`` is an OpenAI error body ``{"error": {...}}``; the openai client raises on it."""
    return event(body)
