"""Token ids → text for the embedded engine's decode loop (backends/token_text.py): pure, no model."""

from __future__ import annotations

from backends.token_text import TokenText


def tiny_byte_level_tokenizer() -> dict[str, object]:
    # "é" is the bytes C3 A9; byte-level BPE spells them "Ã" and "©"; "Ġ" is the space byte.
    vocab = {"<pad>": 0, "</s>": 1, "a": 2, "Ġa": 3, "Ã": 4, "©": 5, "Ã©": 6, "<x>": 7}
    added = [
        {"id": 0, "content": "<pad>", "special": True},
        {"id": 1, "content": "</s>", "special": True},
        {"id": 7, "content": "<x>", "special": False},
    ]
    return {"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added, "decoder": {"type": "ByteLevel"}}


def table() -> TokenText:
    built = TokenText.from_tokenizer_json(tiny_byte_level_tokenizer(), 9)
    assert built is not None
    return built


def test_tokens_give_their_bytes_as_text_and_special_tokens_none() -> None:
    stream = table().stream()
    assert [stream.decode(t) for t in (2, 3, 6, 0, 1, 7)] == ["a", " a", "é", "", "", "<x>"]


def test_a_character_split_across_tokens_comes_out_whole_with_its_last_byte() -> None:
    stream = table().stream()
    assert [stream.decode(t) for t in (2, 4, 5, 3)] == ["a", "", "é", " a"]


def test_each_sequence_has_its_own_held_back_bytes() -> None:
    text = table()
    first, second = text.stream(), text.stream()
    assert first.decode(4) == ""  # half of "é" held by the first stream only
    assert second.decode(2) == "a"
    assert first.decode(5) == "é"


def test_bytes_that_are_not_utf8_come_out_as_the_replacement_character() -> None:
    stream = table().stream()
    assert stream.decode(5) == "\ufffd"  # a continuation byte with no lead
    assert stream.decode(4) == "" and stream.decode(2) == "\ufffda"  # a lead byte cut short


def test_ids_past_the_table_add_no_text() -> None:
    stream = table().stream()
    assert stream.decode(8) == "" and stream.decode(9) == "" and stream.decode(-1) == ""


def test_other_tokenizers_keep_the_library_stream() -> None:
    assert TokenText.from_tokenizer_json({"model": {"vocab": {"▁a": 0}}}, 1) is None
    assert TokenText.from_tokenizer_json({"decoder": {"type": "ByteLevel"}, "model": {}}, 1) is None
    sequence = {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}
    assert TokenText.from_tokenizer_json({"decoder": sequence, "model": {"vocab": {"a": 0}}}, 1) is not None
