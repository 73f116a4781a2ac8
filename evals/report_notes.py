"""The notes under ``turnout compare``'s table: what each mark (†, §, ¶, ‡) on a row means.

Pure: rows in, lines out; ``evals.report`` puts them under the Markdown and HTML tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploy import accelerators

if TYPE_CHECKING:
    from evals.report import Row

SHARED_NOTE = (
    "\n† measured in one load run with other variants (a split route): its tokens/s and req/s are "
    "its share of the traffic, not its speed; cost per million tokens and speed ratios need a "
    "run of its own (`turnout loadtest --variant`)."
)

SPLIT_EVAL_NOTE = (
    "\n§ scored in an eval of a split route: only on the prompts it served there (its n is theirs), "
    "or not at all from a run that did not record which variant served each prompt; an eval of "
    "its own (`turnout eval --model VARIANT`) scores it on every prompt."
)


def mixed_reference_note(rows: Sequence[Row]) -> list[str]:
    """A line naming the rows whose agreement is with a split reference route, and its variants."""
    mixed = [f"{r.variant} (against {', '.join(r.mixed_reference)})" for r in rows if r.mixed_reference]
    if not mixed:
        return []
    return [
        f"\n¶ agreement measured against a split reference route, so with a mix of variants, not one: "
        f"{'; '.join(mixed)}; name one variant as `turnout eval --reference`."
    ]


def unpriced_note(rows: Sequence[Row]) -> list[str]:
    """A line naming accelerators that were measured but have no price in the catalog."""
    names = sorted(
        {r.accelerator for r in rows if r.accelerator and r.tokens_per_s and not r.shared_run}
        - {r.accelerator for r in rows if r.usd_per_m_tokens is not None}
    )
    unknown = [name for name in names if name not in accelerators.names()]
    if not unknown:
        return []
    return [
        f"\n‡ no price for accelerator {', '.join(unknown)}: not in the catalog "
        f"({', '.join(accelerators.names())}); name one of those in the variant's `accelerator` "
        f"(the file ${accelerators.PRICES_ENV} names can change their prices)."
    ]


def notes(rows: Sequence[Row]) -> list[str]:
    """The notes under the table: what †, §, ¶ and ‡ mean, for those the rows use."""
    shared = [SHARED_NOTE] if any(r.shared_run for r in rows) else []
    split = [SPLIT_EVAL_NOTE] if any(r.split_eval for r in rows) else []
    return shared + split + mixed_reference_note(rows) + unpriced_note(rows)
