"""Shadow answer comparison."""

from __future__ import annotations

import numpy as np
import pytest

from serving.routing.compare import Answer, compare, embeddings_text, normalize


def test_exact_match() -> None:
    result = compare(Answer(200, "Hello there.", 0.5), Answer(200, "Hello there.", 0.5))
    assert result.exact_match
    assert not result.differs
    assert not result.status_mismatch
    assert result.similarity == 1.0
    assert result.length_ratio == 1.0
    assert result.latency_delta_s == 0.0


def test_normalize_strips_collapses_and_casefolds() -> None:
    assert normalize("  Hello\n\tWORLD  again ") == "hello world again"
    assert normalize("Straße") == "strasse"
    assert normalize(" \n ") == ""


def test_case_and_whitespace_differences_are_similar_but_not_exact() -> None:
    result = compare(Answer(200, "Hello  World\n", 0.2), Answer(200, "hello world", 0.2))
    assert not result.exact_match
    assert result.differs
    assert result.similarity == 1.0


def test_similarity_of_different_texts() -> None:
    result = compare(Answer(200, "abcd", 0.1), Answer(200, "abXd", 0.1))
    assert result.similarity == pytest.approx(0.75)
    unrelated = compare(Answer(200, "aaaa", 0.1), Answer(200, "zzzz", 0.1))
    assert unrelated.similarity == 0.0


def test_empty_strings() -> None:
    both = compare(Answer(200, "", 0.1), Answer(200, "", 0.1))
    assert both.exact_match
    assert both.similarity == 1.0
    assert both.length_ratio == 1.0
    shadow_empty = compare(Answer(200, "four", 0.1), Answer(200, "", 0.1))
    assert shadow_empty.similarity == 0.0
    assert shadow_empty.length_ratio == 0.0
    primary_empty = compare(Answer(200, "", 0.1), Answer(200, "abc", 0.1))
    assert primary_empty.similarity == 0.0
    assert primary_empty.length_ratio == 3.0


def test_status_mismatch_is_never_an_exact_match() -> None:
    result = compare(Answer(200, "same", 0.1), Answer(502, "same", 0.1))
    assert result.status_mismatch
    assert not result.exact_match
    assert result.differs
    assert result.similarity == 1.0


def test_length_ratio_uses_raw_lengths() -> None:
    result = compare(Answer(200, "1234567890", 0.1), Answer(200, "12345", 0.1))
    assert result.length_ratio == 0.5
    longer = compare(Answer(200, "ab", 0.1), Answer(200, "abcdef", 0.1))
    assert longer.length_ratio == 3.0


def test_latency_delta_is_shadow_minus_primary() -> None:
    assert compare(Answer(200, "x", 0.25), Answer(200, "x", 1.0)).latency_delta_s == pytest.approx(0.75)
    assert compare(Answer(200, "x", 1.0), Answer(200, "x", 0.25)).latency_delta_s == pytest.approx(-0.75)


def test_embeddings_compare_as_vectors_by_their_mean_cosine() -> None:
    primary = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    same = compare(Answer(200, "p", 0.1, primary), Answer(200, "s", 0.3, primary.copy()))
    assert same.exact_match and same.similarity == pytest.approx(1.0) and same.length_ratio == 1.0
    assert same.latency_delta_s == pytest.approx(0.2)
    turned = np.array([[1.0, 1.0], [0.0, -3.0]], dtype=np.float32)  # 45° off, then opposite (as 0)
    result = compare(Answer(200, "p", 0.1, primary), Answer(200, "p", 0.1, turned))
    assert result.differs and result.similarity == pytest.approx((2**-0.5 + 0.0) / 2)
    longer = np.ones((2, 4), dtype=np.float32)
    other_size = compare(Answer(200, "p", 0.1, primary), Answer(200, "p", 0.1, longer))
    assert other_size.differs and other_size.similarity == 0.0 and other_size.length_ratio == 2.0


def test_an_embeddings_answer_reads_as_its_size_and_first_numbers() -> None:
    vectors = np.array([[0.5, -0.25, 0.125, 1.0, 2.0]] * 3, dtype=np.float32)
    assert embeddings_text(vectors) == "3 × 5 dimensions: [0.5000, -0.2500, 0.1250, 1.0000, …]"
    assert embeddings_text(vectors[:, :2]) == "3 × 2 dimensions: [0.5000, -0.2500]"
