"""``Usage``: the counts every engine reports, plus an upstream's details passed on as shaped;
and an upstream's other fields folded across chunks."""

from __future__ import annotations

from backends.base import Usage, merge_extra


def test_counts_alone() -> None:
    assert Usage(7, 3).as_dict() == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_details_ride_along() -> None:
    usage = Usage(192, 2, {"prompt_tokens_details": {"cached_tokens": 128, "multimodal_tokens": None}})
    assert usage.as_dict() == {
        "prompt_tokens": 192,
        "completion_tokens": 2,
        "total_tokens": 194,
        "prompt_tokens_details": {"cached_tokens": 128, "multimodal_tokens": None},
    }


def test_a_batch_sums_counts_and_details() -> None:
    total = Usage()
    total.add(Usage(10, 2, {"prompt_tokens_details": {"cached_tokens": 0, "multimodal_tokens": None}}))
    total.add(Usage(12, 3, {"prompt_tokens_details": {"cached_tokens": 8}, "service": "x"}))
    total.add(Usage(5, 1))  # an engine that reports no details
    assert (total.prompt_tokens, total.completion_tokens) == (27, 6)
    assert total.details == {
        "prompt_tokens_details": {"cached_tokens": 8, "multimodal_tokens": None},
        "service": "x",
    }


def test_two_chunks_extra_fields_fold_into_one_token_ids_joined() -> None:
    """The finish chunk and the usage chunk after it become one event: ids go on, the rest the later."""
    first = {"token_ids": [5, 6], "prompt_token_ids": [1, 2]}
    later = {"token_ids": [2], "system_fingerprint": "fp"}
    assert merge_extra(first, later) == {
        "token_ids": [5, 6, 2],
        "prompt_token_ids": [1, 2],
        "system_fingerprint": "fp",
    }
    assert merge_extra(None, later) is later and merge_extra(first, None) is first
    assert first == {"token_ids": [5, 6], "prompt_token_ids": [1, 2]}  # not changed in place
