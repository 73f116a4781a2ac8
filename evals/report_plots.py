"""``turnout compare``'s plots: accuracy against cost, and latency against throughput (PNG).

The edge of ``evals.report``: rows in, image files out, drawn with matplotlib (the ``[report]``
extra) on the Agg backend. Axes say which tokens the rows count: output tokens, or input tokens
for variants load-tested on ``/v1/embeddings``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evals.report import Row


def _label(axis: Any, text: str, at: tuple[float, float], index: int) -> None:
    """Name a point; labels alternate above-right and below-left, stepping out every other
    index, so variants at nearly the same point stay readable and none climbs into the title."""
    line = {"arrowstyle": "-", "lw": 0.5, "color": "grey"}
    step = 6 + 11 * (index // 2)
    offset, align = ((8, step), "left") if index % 2 == 0 else ((-8, -step - 8), "right")
    axis.annotate(text, at, xytext=offset, textcoords="offset points", fontsize=8, ha=align, arrowprops=line)


def _spread_axis(axis: Any, values: Sequence[float]) -> None:
    """A log scale when the values span more than 5×, so the close ones do not pile up."""
    if values and min(values) > 0 and max(values) / min(values) > 5:
        from matplotlib import ticker

        axis.set_xscale("log")
        axis.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.xaxis.set_minor_formatter(ticker.NullFormatter())


def plots(rows: Sequence[Row], out: Path) -> list[str]:
    import matplotlib

    from evals.report import tokens_kind

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    figure, axis = plt.subplots(figsize=(5.5, 4))
    priced = [r for r in rows if r.accuracy is not None and r.usd_per_m_tokens is not None]
    for index, row in enumerate(priced):
        scale = 1 if row.lower_is_better else 100
        at = (float(row.usd_per_m_tokens or 0), scale * float(row.accuracy or 0))
        axis.scatter(*at)
        _label(axis, row.variant, at, index)
    _spread_axis(axis, [float(r.usd_per_m_tokens or 0) for r in priced])
    kind = tokens_kind(rows)
    axis.set_xlabel(f"USD per million {kind or 'input or output'} tokens")
    perplexity = any(r.lower_is_better for r in priced)
    axis.set_ylabel("perplexity (lower is better)" if perplexity else "accuracy (%)")
    axis.set_title("Perplexity vs cost" if perplexity else "Accuracy vs cost")
    axis.margins(0.2)  # room for the labels inside the axes
    if not perplexity:  # the margin's headroom above 100% gets no tick label: no accuracy is past it
        from matplotlib import ticker

        axis.yaxis.set_major_formatter(
            ticker.FuncFormatter(lambda value, _: "" if value > 100.0001 else f"{value:g}")
        )
    figure.tight_layout()
    figure.savefig(out / "accuracy_vs_cost.png", dpi=110)
    plt.close(figure)
    written.append("accuracy_vs_cost.png")
    figure, axis = plt.subplots(figsize=(5.5, 4))
    timed = [r for r in rows if r.tokens_per_s is not None and r.ttft_p50_ms is not None]
    for index, row in enumerate(timed):
        at = (float(row.tokens_per_s or 0), float(row.ttft_p50_ms or 0))
        axis.scatter(*at)
        _label(axis, row.variant, at, index)
    axis.set_xlabel(f"{kind or 'input or output'} tokens/s")
    axis.set_ylabel("TTFT p50 (ms)")
    axis.set_title("Latency vs throughput")
    axis.margins(0.2)
    figure.tight_layout()
    figure.savefig(out / "latency_vs_throughput.png", dpi=110)
    plt.close(figure)
    written.append("latency_vs_throughput.png")
    return written
