"""Reading an OpenAI-compatible upstream's answer: its text, usage and the fields passed on.

Pure helpers under ``backends/openai_http.py`` on the way back from
an upstream: a choice's text from a string or content parts, the usage with its details, a chat
message's fields beyond role and content, the choice's and answer's other fields (vLLM's
token ids, system_fingerprint…), an SSE event's data, and the fields of text-less stream events
carried onto the next chunk.
"""

from __future__ import annotations

from typing import Any

from backends.base import Chunk, Usage, merge_extra

_MESSAGE_FIELDS = frozenset({"role", "content"})


def message_extra(message: Any) -> dict[str, Any] | None:
    """A chat message's (or delta's) fields beyond role and content that carry something:
    ``tool_calls``, ``refusal``, ``reasoning_content``… (vLLM sends the unused ones as null)."""
    if not isinstance(message, dict):
        return None
    extra = {k: v for k, v in message.items() if k not in _MESSAGE_FIELDS and v is not None and v != []}
    return extra or None


_COUNTS = frozenset({"prompt_tokens", "completion_tokens", "total_tokens"})
# What the gateway writes itself; anything else an upstream set is passed on (``other_fields``).
CHOICE_FIELDS = frozenset({"index", "text", "message", "logprobs", "finish_reason", "stop_reason"})
STREAM_CHOICE_FIELDS = CHOICE_FIELDS | {"delta"}
RESPONSE_FIELDS = frozenset({"id", "object", "created", "model", "choices", "usage"})


def other_fields(data: dict[str, Any], known: frozenset[str]) -> dict[str, Any] | None:
    """``data``'s fields beyond ``known`` that carry something (vLLM sends unused ones as null)."""
    found = {k: v for k, v in data.items() if k not in known and v is not None}
    return found or None


def usage_of(data: Any) -> Usage | None:
    if not isinstance(data, dict):
        return None
    details = {k: v for k, v in data.items() if k not in _COUNTS and v is not None}
    return Usage(
        int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0), details or None
    )


def bare(chunk: Chunk) -> bool:
    """A chunk with no text, delta fields or logprobs: its usage (the stream's last, usually) and
    an upstream's own fields are all it holds."""
    return not chunk.text and chunk.extra is None and chunk.logprobs is None


class CarriedFields:
    """An upstream's own fields from chunks with nothing else, kept for the next chunk passed on."""

    __slots__ = ("answer", "choice")

    def __init__(self) -> None:
        self.choice: dict[str, Any] | None = None
        self.answer: dict[str, Any] | None = None

    def add(self, chunk: Chunk) -> None:
        self.choice = merge_extra(self.choice, chunk.choice_extra)
        self.answer = merge_extra(self.answer, chunk.response_extra)

    def onto(self, chunk: Chunk) -> Chunk:
        """``chunk`` with the kept fields first (its own after them); nothing is kept after."""
        chunk.choice_extra = merge_extra(self.choice, chunk.choice_extra)
        chunk.response_extra = merge_extra(self.answer, chunk.response_extra)
        self.choice = self.answer = None
        return chunk


def text_of(content: Any) -> str:
    """A choice's text: a string, null, or a list of content parts (which some OpenAI-compatible
    servers send), whose ``text`` parts are joined (other kinds, e.g. a reasoning part, are not
    the answer's text); anything else is a malformed answer (a 502)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        texts = [part.get("text") for part in content if part.get("type", "text") == "text"]
        if all(isinstance(text, str) for text in texts):
            return "".join(texts)
    raise TypeError(f"the answer's content is a {type(content).__name__}, not text")


def stop_reason_of(choice: dict[str, Any]) -> str | int | None:
    """vLLM's ``stop_reason`` of a choice: the stop string or stop token id that ended it."""
    reason = choice.get("stop_reason")
    return reason if isinstance(reason, str | int) and not isinstance(reason, bool) else None


def event_data(event: bytes) -> bytes | None:
    """The ``data:`` payload of one SSE event (lines joined), or None for comments/other fields."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].lstrip(b" ")
    parts = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None
