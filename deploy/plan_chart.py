"""``turnout plan --png``: bar charts of throughput and cost per million tokens per accelerator:
decode tokens/s and output tokens for a generating variant, prefill tokens/s and input tokens
for an embedding one (``task: embed``, whose whole work is the prompt pass).

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


def write_chart(rows: Sequence[PlanRow], path: Path, title: str, task: str = "generate") -> Path:
    """Write a PNG to ``path``: decode tokens/s (1 sequence, max batch) and $/M output tokens, or
    for ``task`` embed prefill tokens/s and $/M input tokens."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartUnavailable(f"the plan chart needs matplotlib: {INSTALL_HINT}") from None

    names = [row.accelerator for row in rows]
    positions = list(range(len(rows)))
    figure = Figure(figsize=(max(6.0, 0.9 * len(rows) + 2), 7.0), layout="constrained")
    FigureCanvasAgg(figure)
    speed, cost = figure.subplots(2, 1, sharex=True)
    embeds = task == "embed"
    if embeds:
        speed.bar(positions, [r.prefill_tok_s or 0.0 for r in rows], 0.6, label="prefill")
        speed.set_ylabel("input tokens/s (prefill roofline)")
        costs = [r.usd_per_m_input_tokens for r in rows]
    else:
        width = 0.4
        single = [r.decode_tok_s_single for r in rows]
        batched = [r.decode_tok_s_max_batch for r in rows]
        speed.bar([p - width / 2 for p in positions], single, width, label="1 sequence")
        speed.bar([p + width / 2 for p in positions], batched, width, label="max batch")
        speed.set_ylabel("decode tokens/s (roofline)")
        costs = [r.usd_per_m_output_tokens for r in rows]
    speed.set_yscale("symlog", linthresh=1.0)
    speed.legend()
    speed.set_title(title)
    colors = ["tab:green" if r.fits and not r.problems else "tab:gray" for r in rows]
    cost.bar(positions, [usd or 0.0 for usd in costs], 0.6, color=colors)
    for position, usd in zip(positions, costs, strict=True):
        if usd is None:
            cost.annotate("n/a", (position, 0), ha="center", va="bottom")
    cost.set_ylabel(f"USD per million {'input' if embeds else 'output'} tokens")
    cost.set_xticks(positions, names, rotation=30, ha="right")
    at = "at the prefill roofline" if embeds else "at max batch"
    cost.set_title(f"{at}; gray: does not fit, or not deployable as written", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100, metadata={"Software": None})
    return path
