"""``turnout plan --png``: a bar chart of decode tokens/s and cost per million output tokens per accelerator.

Off the request path, optional: matplotlib is the ``[report]`` extra and is imported only here,
when a chart is asked for. Draws on a bare ``Figure`` with the Agg canvas (no pyplot, no global
state, no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deploy.plan import PlanRow

INSTALL_HINT = "pip install 'turnout[report]'"


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def write_chart(rows: Sequence[PlanRow], path: Path, title: str) -> Path:
    """Write a PNG to ``path``: decode tokens/s (1 sequence, max batch) and $/M output tokens."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartUnavailable(f"the plan chart needs matplotlib: {INSTALL_HINT}") from None

    names = [row.accelerator for row in rows]
    positions = list(range(len(rows)))
    figure = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2), 7.0), layout="constrained")
    FigureCanvasAgg(figure)
    decode, cost = figure.subplots(2, 1, sharex=True)
    width = 0.4
    single = [r.decode_tok_s_single for r in rows]
    batched = [r.decode_tok_s_max_batch for r in rows]
    decode.bar([p - width / 2 for p in positions], single, width, label="1 sequence")
    decode.bar([p + width / 2 for p in positions], batched, width, label="max batch")
    decode.set_yscale("symlog", linthresh=1.0)
    decode.set_ylabel("decode tokens/s (roofline)")
    decode.legend()
    decode.set_title(title)
    costs = [r.usd_per_m_output_tokens or 0.0 for r in rows]
    colors = ["tab:green" if r.fits and not r.problems else "tab:gray" for r in rows]
    cost.bar(positions, costs, 0.6, color=colors)
    for position, row in zip(positions, rows, strict=True):
        if row.usd_per_m_output_tokens is None:
            cost.annotate("n/a", (position, 0), ha="center", va="bottom")
    cost.set_ylabel("USD per million output tokens")
    cost.set_xticks(positions, names, rotation=30, ha="right")
    cost.set_title("at max batch; gray: does not fit, or not deployable as written", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100, metadata={"Software": None})
    return path
