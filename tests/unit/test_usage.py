"""``Usage``: the counts every engine reports, plus an upstream's details passed on as shaped."""

from __future__ import annotations

from backends.base import Usage


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
