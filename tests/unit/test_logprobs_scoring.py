"""Logits → logprobs, token strings and the OpenAI shapes (``backends/logprobs.py``), without a model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from backends.logprobs import (
    CompletionLogprobs,
    TokenScore,
    TokenTable,
    chat_content,
    log_softmax,
    merge_logprobs,
    prompt_scores,
    score_rows,
    token_table,
    without_leading,
)


def test_log_softmax_is_normalised_and_stable_for_huge_logits() -> None:
    logits = np.array([[1000.0, 1001.0, 999.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    result = log_softmax(logits)
    assert np.allclose(np.exp(result).sum(axis=-1), 1.0)
    assert result[1][0] == pytest.approx(-math.log(3))
    assert result[0][1] == pytest.approx(-math.log(1 + math.exp(-1) + math.exp(-2)))


def test_score_rows_gives_the_token_and_the_best_alternatives_best_first() -> None:
    logits = np.log(np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]]))
    first, second = score_rows(logits, [2, 1], top=2)
    assert first.token == 2 and first.logprob == pytest.approx(math.log(0.3))
    assert [t for t, _ in first.top] == [1, 2]
    assert first.top[0][1] == pytest.approx(math.log(0.6))
    assert [t for t, _ in second.top] == [0, 2] and second.logprob == pytest.approx(math.log(0.2))


def test_score_rows_without_alternatives_and_with_more_asked_than_the_vocabulary() -> None:
    logits = np.zeros((1, 3))
    assert score_rows(logits, [0], top=0) == [TokenScore(0, pytest.approx(-math.log(3)))]
    assert len(score_rows(logits, [0], top=20)[0].top) == 3
    assert score_rows(np.zeros((0, 3)), [], top=2) == []


def test_an_impossible_token_is_floored_not_minus_infinity() -> None:
    logits = np.array([[0.0, -np.inf]])
    (score,) = score_rows(logits, [1], top=1)
    assert score.logprob == -9999.0 and math.isfinite(score.logprob)


def test_prompt_scores_leave_the_first_token_unscored() -> None:
    logits = np.log(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
    scores = prompt_scores(logits, [1, 0, 1], top=0)
    assert scores[0] == TokenScore(1, None)
    assert scores[1].logprob == pytest.approx(math.log(0.5))  # logits[0] predicts ids[1]
    assert scores[2].logprob == pytest.approx(math.log(0.1))
    assert prompt_scores(logits, [], top=0) == []


def test_without_leading_makes_the_next_token_the_unscored_first() -> None:
    scores = [TokenScore(1, None), TokenScore(7, -0.5), TokenScore(8, -0.25)]
    assert without_leading(scores) == [TokenScore(7, None), TokenScore(8, -0.25)]
    assert without_leading(scores[:1]) == []


def tiny_byte_level_tokenizer() -> dict[str, object]:
    # "é" is the bytes C3 A9; byte-level BPE spells them "Ã" and "©"; "Ġ" is the space byte.
    vocab = {"<pad>": 0, "</s>": 1, "a": 2, "Ġa": 3, "Ã": 4, "©": 5, "Ã©": 6}
    added = [{"id": 0, "content": "<pad>"}, {"id": 1, "content": "</s>"}]
    return {"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added, "decoder": {"type": "ByteLevel"}}


def test_token_table_spells_bytes_and_special_tokens_like_the_tokenizer() -> None:
    table = token_table(tiny_byte_level_tokenizer(), 8, decode=lambda i: f"<{i}>")
    assert table.strings[:4] == ("<pad>", "</s>", "a", " a")
    assert table.strings[4] == "\ufffd" and table.raw[4] == b"\xc3"  # half a character
    assert table.strings[6] == "é" and table.raw[6] == "é".encode()
    assert table.text([2, 4, 5, 1]) == "aé</s>"  # the halves join back
    assert table.strings[7] == "<7>"  # an id past the vocabulary: the tokenizer's own decode


def test_a_non_byte_level_tokenizer_uses_its_decode() -> None:
    table = token_table({"model": {"vocab": {"▁a": 0}}}, 1, decode=lambda i: " a")
    assert table.strings == (" a",) and table.raw == (b" a",)


TABLE = TokenTable(("<s>", "1", "2", " cat", "\ufffd"), (b"<s>", b"1", b"2", b" cat", b"\xe2"))


def test_the_completion_block_has_the_token_itself_among_its_alternatives() -> None:
    writer = CompletionLogprobs(TABLE)
    block = writer.block([TokenScore(1, None), TokenScore(3, -2.0, ((2, -0.1),))])
    assert block == {
        "tokens": ["1", " cat"],
        "token_logprobs": [None, -2.0],
        "top_logprobs": [None, {" cat": -2.0, "2": -0.1}],
        "text_offset": [0, 1],
    }
    # Offsets go on across a stream's chunks.
    assert writer.block([TokenScore(2, -0.5, ((2, -0.5),))])["text_offset"] == [5]


def test_the_chat_block_has_bytes_and_exactly_top_alternatives() -> None:
    scores = [TokenScore(1, None), TokenScore(4, -1.5, ((2, -0.2), (4, -1.5), (1, -3.0)))]
    (entry,) = chat_content(scores, TABLE, top=2)["content"]
    assert entry["token"] == "\ufffd" and entry["bytes"] == [0xE2] and entry["logprob"] == -1.5
    assert [alt["token"] for alt in entry["top_logprobs"]] == ["2", "\ufffd"]
    assert chat_content([TokenScore(2, -0.1, ((2, -0.1),))], TABLE, top=0)["content"][0]["top_logprobs"] == []


def test_merge_joins_consecutive_pieces_of_either_shape() -> None:
    a = {"tokens": ["a"], "token_logprobs": [None], "top_logprobs": [None], "text_offset": [0]}
    b = {"tokens": ["b"], "token_logprobs": [-1.0], "top_logprobs": [{"b": -1.0}], "text_offset": [1]}
    merged = merge_logprobs(a, b)
    assert merged == {
        "tokens": ["a", "b"],
        "token_logprobs": [None, -1.0],
        "top_logprobs": [None, {"b": -1.0}],
        "text_offset": [0, 1],
    }
    assert list(merged or {}) == ["tokens", "token_logprobs", "top_logprobs", "text_offset"]
    chat = merge_logprobs({"content": [{"token": "x"}]}, {"content": [{"token": "y"}]})
    assert chat == {"content": [{"token": "x"}, {"token": "y"}]}
    assert merge_logprobs(None, b) is b and merge_logprobs(a, None) is a
    assert merge_logprobs(None, None) is None
