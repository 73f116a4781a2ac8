"""The key ``prefix_affinity`` balancing sends alike: a request's first characters (pure).

Where it sits: a replica set (``backends/replica_set.py``) makes it per request for
``serving.routing.balance.choose``. Requests whose prompts begin with the same ``chars``
characters get the same key, so they reach the same replica while it is not overloaded, and
its prefix cache serves what they share: a system prompt, few-shot examples, a document asked
about again, a conversation's earlier turns. A chat's key reads each message's role and text in
order (a tool call's name and arguments too), as its prompt will begin; a completion's, its text
or its first token ids. Nothing to read (an empty prompt): None, and the set balances by load.
"""

from __future__ import annotations

import hashlib
from typing import Any

from backends.base import GenerateRequest


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts; other parts by their type alone
        return "".join(
            str(p.get("text", p.get("type", ""))) if isinstance(p, dict) else str(p) for p in content
        )
    return "" if content is None else str(content)


def _chat_start(messages: list[dict[str, Any]], chars: int) -> str:
    pieces: list[str] = []
    length = 0
    for message in messages:
        calls = "".join(
            f"{(c.get('function') or {}).get('name', '')}{(c.get('function') or {}).get('arguments', '')}"
            for c in message.get("tool_calls") or ()
            if isinstance(c, dict)
        )
        piece = f"<{message.get('role', '')}>{_text(message.get('content'))}{calls}"
        pieces.append(piece)
        length += len(piece)
        if length >= chars:
            break
    return "".join(pieces)[:chars]


def prefix_key(request: GenerateRequest, chars: int) -> bytes | None:
    """sha256 of the request's first ``chars`` characters (a chat's messages, a completion's
    prompt; token ids as their decimal list), or None when it has none."""
    if request.kind == "chat":
        start = _chat_start(request.messages or [], chars)
    elif request.prompt_ids is not None:
        start = ",".join(str(i) for i in request.prompt_ids[: max(1, chars // 4)])
    else:
        start = (request.prompt or "")[:chars]
    if not start:
        return None
    return hashlib.sha256(f"{request.kind}\0{start}".encode()).digest()
