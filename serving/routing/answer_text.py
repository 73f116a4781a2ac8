"""An answer as shadow comparison reads it: its content plus its tool calls (or its vectors).

On the request path only when a route has shadows: the gateway and the shadow tee turn each
primary and shadow answer into one string for :func:`serving.routing.compare.compare`
(:func:`completion_answer`; an embeddings answer keeps its vectors, :func:`embeddings_answer`). A
tool-calling answer often has no content at all, so comparing content alone called two
different calls a match. Calls are written ``name(arguments)``, one per line after the content;
their ids are left out (each engine makes up its own). Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from backends.base import Completion, Embeddings
from serving.routing.compare import Answer, embeddings_text


def _calls_text(calls: Iterable[tuple[str, str]]) -> str:
    return "".join(f"\n{name}({arguments})" for name, arguments in calls)


def _field(call: Any, *path: str) -> str:
    for key in path:
        call = call.get(key) if isinstance(call, dict) else None
    return call if isinstance(call, str) else ""


def answer_text(content: str, message_extra: dict[str, Any] | None) -> str:
    """A whole answer's comparable text (``Completion.text`` and ``.message_extra``)."""
    calls = message_extra.get("tool_calls") if message_extra else None
    if not isinstance(calls, list) or not calls:
        return content
    return content + _calls_text(
        (_field(c, "function", "name"), _field(c, "function", "arguments")) for c in calls
    )


class StreamedAnswer:
    """The same text for a streamed answer, assembled from its chunks' text and delta fields
    (a call arrives in pieces: its name once, its arguments a few characters at a time)."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._calls: dict[int, list[str]] = {}

    def add(self, text: str, delta_extra: dict[str, Any] | None) -> None:
        self._pieces.append(text)
        calls = delta_extra.get("tool_calls") if delta_extra else None
        for position, delta in enumerate(calls if isinstance(calls, list) else ()):
            index = delta.get("index", position) if isinstance(delta, dict) else position
            call = self._calls.setdefault(index if isinstance(index, int) else position, ["", ""])
            call[0] += _field(delta, "function", "name")
            call[1] += _field(delta, "function", "arguments")

    def text(self) -> str:
        content = "".join(self._pieces)
        return content + _calls_text((name, args) for _, (name, args) in sorted(self._calls.items()))


def completion_answer(result: Completion, elapsed_s: float) -> Answer:
    """A whole generated answer (200), as compared."""
    return Answer(200, answer_text(result.text, result.message_extra), elapsed_s)


def embeddings_answer(result: Embeddings, elapsed_s: float) -> Answer:
    """An embeddings answer (200): its vectors, and what the recorder shows of them."""
    return Answer(200, embeddings_text(result.vectors), elapsed_s, result.vectors)
