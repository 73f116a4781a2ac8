"""Load-test reports: one run's markdown summary, and a side-by-side comparison table and chart.

Off the request path: ``turnout loadtest`` writes ``summary.md`` with :func:`summary_markdown`;
``turnout loadtest compare DIR…`` prints :func:`compare_table` and writes a PNG with
:func:`compare_chart` (matplotlib, ``pip install 'turnout[report]'``). Formatting is pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def embeds(summary: dict[str, Any]) -> bool:
    """A run of ``/v1/embeddings``: its tokens/s are the input tokens embedded (it generates none)."""
    return summary.get("endpoint") == "embeddings"


def tokens_per_s(summary: dict[str, Any], block: dict[str, Any]) -> float:
    """A STATS block's tokens/s: output tokens, or an embeddings run's input tokens."""
    if embeds(summary):
        return float(block.get("prompt_tokens_per_s") or 0.0)
    return float(block["output_tokens_per_s"])


def _row(name: str, summary: dict[str, Any], block: dict[str, Any]) -> str:
    ttft, itl, latency = block["ttft_ms"], block["itl_ms"], block["latency_ms"]
    tokens = f"{tokens_per_s(summary, block):.0f}" + (" in" if embeds(summary) else "")
    return (
        f"| {name} | {block['requests']} | {block['errors']} | {block['req_per_s']:.1f} | "
        f"{tokens} | {_ms(ttft['p50'])} | {_ms(ttft['p99'])} | "
        f"{_ms(itl['p50'])} | {_ms(latency['p50'])} | {_ms(latency['p99'])} |"
    )


HEADER = (
    "| | requests | errors | req/s | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | latency p50 ms "
    "| latency p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _prompt_sentence(summary: dict[str, Any]) -> str:
    """What the prompts were: the shape asked for, and what the server counted (its template on top)."""
    request = summary.get("request") or {}
    asked = request.get("prompt_tokens")
    if request.get("trace"):
        said = f"from a trace of {request['trace']['shapes']} shapes"
    elif asked:
        span = str(asked[0]) if asked[0] == asked[1] else f"{asked[0]}-{asked[1]}"
        said = f"{span} tokens of text"
    else:
        return ""
    mean = summary["overall"].get("prompt_tokens_mean")
    counted = ""
    if mean is not None:  # a chat adds its template's tokens, any prompt its BOS
        added = "BOS" if summary["endpoint"] in ("completions", "embeddings") else "chat template and BOS"
        counted = f", {mean:.1f} as the server counted them ({added} included)"
    if summary["endpoint"] == "embeddings":  # no output tokens: the input is the work
        per_s = summary["overall"].get("prompt_tokens_per_s") or 0.0
        counted += f"; {per_s:.0f} input tokens/s embedded"
    return f" Prompts: {said}{counted}."


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# Load test: {summary['route']} ({summary['scenario']}, {summary['users']} users, "
        f"{summary['duration_s']:.0f} s)",
        "",
        f"Target {summary['target']}, {summary['endpoint']}, stream {summary['stream']}, "
        f"started {summary['started_at']}." + _prompt_sentence(summary),
        "",
        HEADER,
        _row("all", summary, summary["overall"]),
    ]
    lines += [_row(name, summary, block) for name, block in summary["per_variant"].items()]
    errors = summary["overall"]["errors_by_kind"]
    if errors:
        lines += ["", "Errors: " + ", ".join(f"{kind} {count}" for kind, count in sorted(errors.items()))]
        examples = summary["overall"].get("error_examples") or {}
        lines += [f"- first {kind}: {examples[kind]}" for kind in sorted(errors) if kind in examples]
    estimated = summary["overall"].get("output_tokens_estimated", 0)
    if estimated:
        requests = summary["overall"]["requests"]
        lines += ["", f"Output tokens estimated for {estimated} of {requests} requests: their streams "
                  "carried no usage, so each content chunk counted as one token."]  # fmt: skip
    knee = summary.get("knee")
    if knee:
        slo = knee["slo"]
        lines += [
            "",
            f"Max sustainable rate: **{knee['max_sustainable_rps']:.1f} req/s** "
            f"(SLO: p95 TTFT ≤ {slo['p95_ttft_ms']:.0f} ms, errors ≤ {slo['max_error_rate']:.1%})",
            "",
            "| users | req/s | p95 TTFT ms | error rate | holds |",
            "|---:|---:|---:|---:|---|",
        ]
        lines += [
            f"| {s['users']} | {s['req_per_s']:.1f} | {_ms(s['p95_ttft_ms'])} | {s['error_rate']:.1%} | "
            f"{'yes' if s['ok'] else 'no'} |"
            for s in knee["steps"]
        ]
    return "\n".join(lines) + "\n"


def load_summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a load-test summary ({exc})") from None
    if data.get("schema") != "turnout.loadtest/1":
        raise ValueError(f"{path}: schema {data.get('schema')!r} is not turnout.loadtest/1")
    return data


def run_label(summary: dict[str, Any], folder: Path) -> str:
    return f"{summary['route']} ({folder.name})"


def run_labels(runs: Sequence[tuple[Path, dict[str, Any]]]) -> list[str]:
    """One label per run, each different: ``route (folder)``, with the parent folder where two
    would read the same (``a/fp32``, ``b/fp32``), and a number where that is not enough either
    (the chart drew runs of one label as one bar)."""
    labels = [run_label(summary, folder) for folder, summary in runs]
    if len(set(labels)) < len(labels):  # resolved: "fp32" given from inside its parent has one too
        labels = [
            f"{summary['route']} ({folder.resolve().parent.name}/{folder.resolve().name})"
            if labels.count(label) > 1
            else label
            for (folder, summary), label in zip(runs, labels, strict=True)
        ]
    return [
        label if labels.count(label) == 1 else f"{label} #{index + 1}" for index, label in enumerate(labels)
    ]


def compare_table(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Markdown table: one row per run, its overall figures."""
    rows = [_row(label, summary, summary["overall"]) for label, summary in runs]
    said = ["", "tokens/s: output tokens; 'in': input tokens embedded (a /v1/embeddings run)"]
    return "\n".join([HEADER, *rows, *(said if any(embeds(s) for _, s in runs) else [])]) + "\n"


def compare_chart(runs: Sequence[tuple[str, dict[str, Any]]], path: Path) -> None:
    """Write :func:`chart` of ``runs`` to ``path`` (a PNG)."""
    import matplotlib.pyplot as plt

    figure = chart(runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def chart(runs: Sequence[tuple[str, dict[str, Any]]]) -> Any:
    """Two panels: TTFT and latency percentiles per run; request and token throughput per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for label, _ in runs]
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / 4
    series = [("ttft_ms", "p50", "TTFT p50"), ("ttft_ms", "p99", "TTFT p99"),
              ("latency_ms", "p50", "latency p50"), ("latency_ms", "p99", "latency p99")]  # fmt: skip
    for index, (block, q, name) in enumerate(series):
        values = [summary["overall"][block][q] or 0.0 for _, summary in runs]
        latency.bar([i + index * width for i in range(len(runs))], values, width, label=name)
    latency.set_xticks([i + 1.5 * width for i in range(len(runs))], labels, rotation=20, ha="right")
    latency.set_ylabel("ms")
    latency.set_title("Latency percentiles")
    latency.legend(fontsize=8)
    rps = [summary["overall"]["req_per_s"] for _, summary in runs]
    tokens = [tokens_per_s(summary, summary["overall"]) for _, summary in runs]
    embedding = {embeds(summary) for _, summary in runs}
    kind = "tokens/s (input for embeddings runs)" if len(embedding) > 1 else "input tokens/s"
    # By position, not by label: bars of equal labels would be drawn as one.
    places = list(range(len(runs)))
    throughput.bar(places, rps, color="tab:blue")
    throughput.set_xticks(places, labels, rotation=20, ha="right")
    throughput.set_ylabel("requests/s", color="tab:blue")
    twin = throughput.twinx()
    twin.plot(places, tokens, "o-", color="tab:orange")
    twin.set_ylabel("output tokens/s" if embedding == {False} else kind, color="tab:orange")
    twin.set_ylim(bottom=0)
    throughput.set_title("Throughput")
    figure.tight_layout()
    return figure
