"""Token ids → text, one token at a time, for the embedded engine's decode loop (pure, no I/O).

On the batcher's worker thread (``backends.ortgenai_runner``) each generated token's text comes
from here. For a byte-level BPE tokenizer (the shipped model's) it is a table of each token's
bytes and Python's incremental UTF-8 decoder, which holds a character's first bytes back until
the rest arrive. ONNX Runtime GenAI's own tokenizer stream does the same through a C call that
cost ~8 µs a token on this project's machine, paid 16 times per batch-16 decode step on the
engine's critical path; the table costs well under 1 µs. Special tokens (``<s>``, ``</s>``, the
chat markers) add no text, as in the library's stream. Bytes that are not valid UTF-8 come out
as U+FFFD, as vLLM and ``tokenizers`` show them (the library's stream drops them). Other
tokenizers keep the library's stream (:meth:`TokenText.from_tokenizer_json` gives None).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any, Protocol


class TextStream(Protocol):
    """One sequence's detokenizer: the text each new token completes (``""`` while incomplete)."""

    def decode(self, token: int) -> str: ...


def byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the others for 256+n."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {chr(b): b for b in printable}
    extra = 0
    for byte in range(256):
        if byte not in printable:
            mapping[chr(256 + extra)] = byte
            extra += 1
    return mapping


def is_byte_level(tokenizer_json: dict[str, Any]) -> bool:
    """Whether a ``tokenizer.json`` decodes byte-level BPE (GPT-2 style) pieces."""
    decoder = tokenizer_json.get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return any(isinstance(p, dict) and p.get("type") == "ByteLevel" for p in parts)


def byte_level_pieces(tokenizer_json: dict[str, Any]) -> dict[int, bytes]:
    """Each vocabulary token's bytes, by id, for a byte-level BPE ``tokenizer.json`` (else none).

    Shared with ``backends.logprobs.token_table``, which spells the same tokens for logprobs."""
    vocab = (tokenizer_json.get("model") or {}).get("vocab")
    if not is_byte_level(tokenizer_json) or not isinstance(vocab, dict):
        return {}
    alphabet = byte_level_alphabet()
    return {int(index): bytes(alphabet.get(ch, 0x3F) for ch in piece) for piece, index in vocab.items()}


class TokenTextStream:
    """One sequence's text, token by token (its own UTF-8 state; one thread at a time)."""

    __slots__ = ("_decode", "_pieces")

    def __init__(self, pieces: tuple[bytes, ...]) -> None:
        self._pieces = pieces
        self._decode: Callable[[bytes], str] = codecs.getincrementaldecoder("utf-8")("replace").decode

    def decode(self, token: int) -> str:
        """The text this token completes; an id outside the table adds none."""
        pieces = self._pieces
        return self._decode(pieces[token]) if 0 <= token < len(pieces) else ""


class TokenText:
    """Each token id's bytes (special tokens: none), shared by every sequence of one model."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: tuple[bytes, ...]) -> None:
        self.pieces = pieces

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: dict[str, Any], vocab_size: int) -> TokenText | None:
        """The table of a byte-level BPE ``tokenizer.json``; None for any other kind."""
        vocab = byte_level_pieces(tokenizer_json)
        if not vocab:
            return None
        pieces = [b""] * vocab_size
        for index, piece in vocab.items():
            if 0 <= index < vocab_size:
                pieces[index] = piece
        for added in tokenizer_json.get("added_tokens") or []:
            index = int(added["id"])
            if 0 <= index < vocab_size:
                pieces[index] = b"" if added.get("special") else str(added["content"]).encode()
        return cls(tuple(pieces))

    def stream(self) -> TokenTextStream:
        return TokenTextStream(self.pieces)
