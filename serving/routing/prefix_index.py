"""Which replica last took each prompt start: what ``prefix_affinity`` balancing prefers.

Where it sits: a replica set (``backends/replica_set.py``) reads a request's start as chained
block hashes (:func:`prompt_blocks`: the first ``BLOCK_CHARS`` characters, then the next with
the first, and so on, as an engine's prefix cache keys its KV blocks), asks :meth:`PrefixIndex.match`
which replica served the longest known run of them, passes that to
``serving.routing.balance.choose``, and :meth:`PrefixIndex.record`\\ s where the request went.
So a request goes where the most of its start was sent before: a shared system prompt or
few-shot examples, a document asked about again, a conversation's earlier turns (each turn's
prompt begins with the last one's). A match shorter than ``MIN_MATCH_SHARE`` of the prompt's
start (a common greeting, a one-line system prompt) prefers nothing: such requests balance by load.

The index approximates the engines' caches from the routing alone (no engine reports its cache
contents): it forgets the least recently used blocks past ``capacity``, and a block moves to the
replica that took it last. Pure data and arithmetic: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from backends.base import GenerateRequest

BLOCK_CHARS = 128  # about 32 tokens of English text: a few of vLLM's 16-token KV blocks
MIN_MATCH_SHARE = 0.1


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts; other parts by their type alone
        parts = (p.get("text", p.get("type", "")) if isinstance(p, dict) else p for p in content)
        return "".join(str(part) for part in parts)
    return "" if content is None else str(content)


def prompt_start(request: GenerateRequest, chars: int) -> str:
    """The first ``chars`` characters of what the engine will read, in order: a chat's messages
    (role, text, tool calls), a completion's prompt, or its token ids as decimals."""
    if request.prompt_ids is not None:
        return ("ids:" + ",".join(str(i) for i in request.prompt_ids[:chars]))[:chars]
    if request.kind != "chat":
        return (request.prompt or "")[:chars]
    pieces: list[str] = []
    length = 0
    for message in request.messages or []:
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


def prompt_blocks(start: str) -> list[bytes]:
    """Chained hashes of ``start``'s whole ``BLOCK_CHARS`` blocks: the i-th names the first i+1."""
    blocks: list[bytes] = []
    previous = b""
    for at in range(0, len(start) - BLOCK_CHARS + 1, BLOCK_CHARS):
        previous = hashlib.sha256(previous + start[at : at + BLOCK_CHARS].encode()).digest()
        blocks.append(previous)
    return blocks


class PrefixIndex:
    """Block hash → the replica (its name) that last took a prompt starting with those blocks."""

    def __init__(self, capacity: int = 65536) -> None:
        self._capacity = capacity
        self._where: OrderedDict[bytes, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._where)

    def match(self, blocks: list[bytes]) -> str | None:
        """The replica that took the longest run of ``blocks`` (at least ``MIN_MATCH_SHARE`` of
        them), or None."""
        for count in range(len(blocks), 0, -1):
            found = self._where.get(blocks[count - 1])
            if found is not None:
                return found if count >= MIN_MATCH_SHARE * len(blocks) else None
        return None

    def record(self, blocks: list[bytes], replica: str) -> None:
        for block in blocks:
            self._where[block] = replica
            self._where.move_to_end(block)
        while len(self._where) > self._capacity:
            self._where.popitem(last=False)
