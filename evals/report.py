"""``turnout compare``: accuracy, latency, throughput and cost of variants side by side, with a verdict.

Off the request path. Joins load-test runs (``turnout.loadtest/1`` summaries: per-variant
latency and throughput, and each variant's accelerator from the gateway) with eval runs
(``turnout.eval/1``: accuracy with intervals) by variant name, prices output tokens (input
tokens for a load run of ``/v1/embeddings``, whose work is the prompt) with the
accelerator catalog (``deploy/accelerators.py``, with ``$TURNOUT_PRICES_FILE``'s prices: price
per hour over tokens per hour), and judges each variant against a baseline: accuracy change
in points (within the budget?), tokens/s ratio, cost ratio. Speed and cost ratios are drawn
only between load runs taken alike (scenario, users, endpoint, streaming; requests of the same
shape: prompt and max tokens, trace, temperature) whose requests did
not fail (at most 1% errors); a perplexity is shown as one (lower is better) and judged by
its relative change, not against the accuracy budget. An eval of a split route credits each
variant only with the figures of the prompts it served (``per_variant``), and a variant's own
eval wins over it. The join and the verdicts are pure;
writing the markdown, HTML and PNG plots (matplotlib) is the edge.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import accelerators
from deploy.accelerators import Accelerator
from evals.report_notes import notes
from evals.report_plots import plots
from loadtests.report import embeds, tokens_per_s

MAX_ERROR_RATE = 0.01  # a load run with more failed requests gives no speed or cost ratio


@dataclass(frozen=True, slots=True)
class Row:
    variant: str
    accuracy: float | None
    accuracy_ci: tuple[float, float] | None
    agreement: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    req_per_s: float | None
    tokens_per_s: float | None
    accelerator: str | None
    usd_per_m_tokens: float | None
    # Which tokens its tokens/s and cost count: "output" (generated), or "input" for a load run
    # of /v1/embeddings, whose work is the prompt (its prompt tokens/s, priced per million of them).
    tokens_kind: str = "output"
    # Its load figures come from a run it shared with other variants (a split route): its
    # tokens/s is its traffic share, not its speed, so no cost or speed ratio is drawn from it.
    shared_run: bool = False
    metric: str = "accuracy"  # the task's own: accuracy, exact_match, perplexity...
    error_rate: float | None = None  # of its load run's requests
    load: str | None = None  # how its load run was taken: "steady, 8 users, chat stream"
    # How its load run's requests were asked ((field, value) pairs of summary.json's "request");
    # None for a summary from before it was recorded, or no load run.
    request: tuple[tuple[str, str], ...] | None = None
    has_load: bool = False
    # Its eval figures come from an eval of a split route: only from the prompts it served there
    # (none from an older run that did not keep them apart).
    split_eval: bool = False
    # Its agreement was measured against a split reference route: the mix of these variants.
    mixed_reference: tuple[str, ...] = ()

    @property
    def lower_is_better(self) -> bool:
        return self.metric == "perplexity"


def _read(folder: Path, schema: str) -> dict[str, Any]:
    path = folder / "summary.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read a run summary ({exc})") from None
    if data.get("schema") != schema:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {schema}")
    return data


Runs = list[dict[str, Any]]


def read_runs(load: Sequence[Path], evals: Sequence[Path]) -> tuple[Runs, Runs]:
    return [_read(p, "turnout.loadtest/1") for p in load], [_read(p, "turnout.eval/1") for p in evals]


def cost_per_million(
    accelerator: str | None, tokens_per_s: float | None, catalog: Mapping[str, Accelerator] | None = None
) -> float | None:
    """USD per million tokens (output, or an embedding run's input) at the catalog's hourly price
    (None when unknown)."""
    if not accelerator or not tokens_per_s:
        return None
    try:
        price = accelerators.get(accelerator, catalog).price_per_hour_usd
    except accelerators.UnknownAccelerator:
        return None
    return price / (tokens_per_s * 3600) * 1e6


def _load_label(run: Mapping[str, Any]) -> str | None:
    if "users" not in run:
        return None
    stream = " stream" if run.get("stream") else ""
    return f"{run.get('scenario', '?')}, {run['users']} users, {run.get('endpoint', '?')}{stream}"


# The request fields that change what a load run measures (its pinned variant and requested
# duration are recorded too, but runs of different variants are meant to be compared).
REQUEST_FIELDS = (("prompt_tokens", "prompt tokens"), ("max_tokens", "max tokens"), ("trace", "trace"),
                  ("temperature", "temperature"))  # fmt: skip


def _request_text(key: str, value: Any) -> str:
    if value is None:
        return "the server's" if key == "temperature" else "-"
    if key == "trace" and isinstance(value, Mapping):
        return f"{value.get('shapes', '?')} shapes, sha256 {value.get('sha256', '?')}"
    if isinstance(value, list) and len(value) == 2:
        return str(value[0]) if value[0] == value[1] else f"{value[0]}-{value[1]}"
    return str(value)


def _request(run: Mapping[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The load run's request shape as (field, text) pairs; None when its summary has none."""
    request = run.get("request")
    if not isinstance(request, Mapping):
        return None
    return tuple((name, _request_text(key, request.get(key))) for key, name in REQUEST_FIELDS)


def _error_rate(run: Mapping[str, Any]) -> float | None:
    """Failed requests over all of the run's (a failed request names no variant: the run's)."""
    overall = run.get("overall") or {}
    requests = overall.get("requests")
    return overall.get("errors", 0) / requests if requests else None


def _served(run: Mapping[str, Any]) -> set[str]:
    """The variants an eval run's answers named ("?": records with no x-turnout-variant)."""
    return set(run.get("variants") or {}) - {"?"}


def split_reference(agreement: Mapping[str, Any] | None) -> list[str]:
    """The variants that answered as the reference when more than one did (a split route), else []."""
    served = [name for name in (agreement or {}).get("reference_variants") or [] if name != "?"]
    return served if len(served) > 1 else []


def _eval_of(variant: str, run: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, bool]:
    """(the block with ``variant``'s ``tasks`` and ``agreement`` in an eval run, or None when the
    run did not measure it; whether the run was of a split route that ``variant`` served part of).

    A split route's figures are the mix of its variants, no one variant's: only the figures from
    the records ``variant`` itself served (``per_variant``) are its own; an older run without
    them gives it none.
    """
    served = _served(run)
    if served == {variant} or (run["model"] == variant and not served - {variant}):
        return run, False
    if variant in served:
        return (run.get("per_variant") or {}).get(variant) or {}, True
    return None, False


def join(
    variant: str,
    loads: Sequence[dict[str, Any]],
    evals: Sequence[dict[str, Any]],
    task: str,
    catalog: Mapping[str, Accelerator] | None = None,
) -> Row:
    """One variant's figures: the last load run and the last eval run that measured it (an eval
    of the variant alone over one of a split route that served it part of the time)."""
    load_stats, accelerator, shared, errors, label = None, None, False, None, None
    load_run: dict[str, Any] = {}
    request: tuple[tuple[str, str], ...] | None = None
    for run in loads:
        if variant in run["per_variant"]:
            load_stats, load_run = run["per_variant"][variant], run
            accelerator = (run.get("variants", {}).get(variant) or {}).get("accelerator")
            # "?": its failed requests, which name no variant; not another variant's share.
            shared = len([name for name in run["per_variant"] if name != "?"]) > 1
            errors, label, request = _error_rate(run), _load_label(run), _request(run)
    accuracy, interval, agreement, metric = None, None, None, "accuracy"
    mixed_reference: tuple[str, ...] = ()
    own: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    split: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for measured in evals:
        block, of_split = _eval_of(variant, measured)
        if block is not None:
            (split if of_split else own).append((block, measured))
    # Its own (unsplit) eval wins over a split route's, whichever was listed last.
    chosen, split_eval = (own or split)[-1:], not own and bool(split)
    for block, source in chosen:
        figures = (block.get("tasks") or {}).get(task)
        if figures:
            accuracy, interval = figures["value"], (figures["ci95"][0], figures["ci95"][1])
            metric = str(figures.get("metric", "accuracy"))
        exact = (block.get("agreement") or {}).get("exact_output_agreement") or {}
        # n 0: none measured (older summaries wrote its value as 0.0), not 0% agreement
        if exact.get("value") is not None and exact.get("n") != 0:
            agreement = exact["value"]
            mixed_reference = tuple(split_reference(block.get("agreement")))
        accelerator = accelerator or (source.get("variants", {}).get(variant) or {}).get("accelerator")
    kind = "input" if embeds(load_run) else "output"
    tokens = tokens_per_s(load_run, load_stats) if load_stats else None
    return Row(
        variant=variant, accuracy=accuracy, accuracy_ci=interval, agreement=agreement,
        ttft_p50_ms=load_stats["ttft_ms"]["p50"] if load_stats else None,
        ttft_p99_ms=load_stats["ttft_ms"]["p99"] if load_stats else None,
        itl_p50_ms=load_stats["itl_ms"]["p50"] if load_stats else None,
        req_per_s=load_stats["req_per_s"] if load_stats else None,
        tokens_per_s=tokens, tokens_kind=kind, accelerator=accelerator,
        usd_per_m_tokens=None if shared else cost_per_million(accelerator, tokens, catalog),
        shared_run=shared, metric=metric, error_rate=errors, load=label, split_eval=split_eval,
        mixed_reference=mixed_reference,
        request=request, has_load=load_stats is not None,
    )  # fmt: skip


def _incomparable(row: Row, baseline: Row) -> str | None:
    """Why the two load runs give no speed or cost ratio (None: they do)."""
    for which in (row, baseline):
        if which.error_rate is not None and which.error_rate > MAX_ERROR_RATE:
            return f"{100 * which.error_rate:.1f}% of {which.variant}'s load requests failed"
    if row.load and baseline.load and row.load != baseline.load:
        return f"load runs taken differently ({row.load} vs {baseline.load})"
    if row.request is not None and baseline.request is not None and row.request != baseline.request:
        differ = [f"{name} {mine} vs {theirs}"
                  for (name, mine), (_, theirs) in zip(row.request, baseline.request, strict=True)
                  if mine != theirs]  # fmt: skip
        return f"load requests asked differently ({', '.join(differ)})"
    return None


def _unknown_request(row: Row, baseline: Row) -> str | None:
    """Which load run's request shape is not known (a summary.json from before it was recorded)."""
    unknown = [r.variant for r in (baseline, row) if r.has_load and r.request is None]
    if not unknown or not (row.has_load and baseline.has_load):
        return None
    runs = "load run" if len(unknown) == 1 else "load runs"
    return f"requests assumed alike (not recorded in the {runs} of {' and '.join(unknown)})"


def verdict(row: Row, baseline: Row, budget_pt: float) -> str:
    """E.g. ``int4: −0.8 pt accuracy, 2.1× tokens/s, 0.48× cost: within the 1 pt budget``."""
    parts, ok = [], True
    if row.accuracy is not None and baseline.accuracy is not None:
        if row.lower_is_better:
            change = row.accuracy / baseline.accuracy - 1 if baseline.accuracy else 0.0
            parts.append(f"{row.metric} {row.accuracy:.2f} vs {baseline.accuracy:.2f} ({change:+.1%})")
        else:
            delta = 100 * (row.accuracy - baseline.accuracy)
            parts.append(f"{delta:+.1f} pt accuracy".replace("-", "−"))
            ok = round(delta, 9) >= -budget_pt  # 198/200 vs 200/200 is −1.0000000000000009 pt
    apart = _incomparable(row, baseline)
    if row.tokens_per_s and baseline.tokens_per_s and not (row.shared_run or baseline.shared_run or apart):
        parts.append(f"{row.tokens_per_s / baseline.tokens_per_s:.2f}× tokens/s")
    if row.usd_per_m_tokens and baseline.usd_per_m_tokens and not apart:
        parts.append(f"{row.usd_per_m_tokens / baseline.usd_per_m_tokens:.2f}× cost")
    if apart and row.variant != baseline.variant:
        parts.append(f"no speed or cost ratio: {apart}")
    unknown = _unknown_request(row, baseline)
    if unknown and not apart and row.variant != baseline.variant and any("×" in part for part in parts):
        parts.append(unknown)
    if row.variant == baseline.variant:
        return f"{row.variant}: baseline" + (f" ({apart})" if apart else "")
    if row.accuracy is None or baseline.accuracy is None:
        return f"{row.variant}: " + (", ".join(parts) or "no figures") + ": no accuracy to judge"
    if row.lower_is_better:
        return f"{row.variant}: {', '.join(parts)}: lower is better; the accuracy budget does not apply"
    judged = f"within the {budget_pt:g} pt budget" if ok else f"outside the {budget_pt:g} pt budget"
    return f"{row.variant}: {', '.join(parts)}: {judged}"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _figure(row: Row, value: float | None) -> str:
    """An accuracy as a percentage; a perplexity as itself."""
    if value is None:
        return "-"
    return f"{value:.2f}" if row.lower_is_better else f"{100 * value:.1f}%"


def tokens_kind(rows: Sequence[Row]) -> str:
    """Which tokens the rows' tokens/s and cost count: output, or input (an embeddings load
    run's); "" when the rows measured with load differ (each cell says which then)."""
    kinds = {r.tokens_kind for r in rows if r.has_load} or {"output"}
    return kinds.pop() if len(kinds) == 1 else ""


def table_rows(rows: Sequence[Row]) -> list[list[str]]:
    figure = "perplexity (lower is better)" if any(r.lower_is_better for r in rows) else "accuracy"
    kind = tokens_kind(rows)
    tokens = f"{kind} tokens" if kind else "tokens"
    head = ["variant", figure, "95% CI", "agreement", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
            "req/s", f"{tokens}/s", "errors", "load run", "accelerator", f"$/M {tokens}"]  # fmt: skip
    mark = {"input": " in", "output": " out"} if not kind else {}  # mixed: each row says which
    body = [
        [r.variant + (" †" if r.shared_run else "") + (" §" if r.split_eval else ""),
         _figure(r, r.accuracy),
         f"{_figure(r, r.accuracy_ci[0])}–{_figure(r, r.accuracy_ci[1])}" if r.accuracy_ci else "-",
         _f(r.agreement and 100 * r.agreement, ".1f") + ("%" if r.agreement is not None else "")
         + (" ¶" if r.mixed_reference else ""),
         _f(r.ttft_p50_ms, ".1f"), _f(r.ttft_p99_ms, ".1f"), _f(r.itl_p50_ms, ".2f"),
         _f(r.req_per_s, ".1f"), _f(r.tokens_per_s, ".0f") + mark.get(r.tokens_kind, ""),
         _f(r.error_rate and 100 * r.error_rate, ".1f") + ("%" if r.error_rate is not None else ""),
         r.load or "-", r.accelerator or "-",
         _f(r.usd_per_m_tokens, ".3f") + (mark.get(r.tokens_kind, "") if r.usd_per_m_tokens else "")]
        for r in rows
    ]  # fmt: skip
    return [head, *body]


def markdown(rows: Sequence[Row], verdicts: Sequence[str], task: str, images: Sequence[str]) -> str:
    table = table_rows(rows)
    lines = [f"# Variant comparison (accuracy: {task})", "", "| " + " | ".join(table[0]) + " |",
             "|" + "---|" * len(table[0])]  # fmt: skip
    lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
    lines += notes(rows)
    lines += ["", "## Verdicts", "", *[f"- {v}" for v in verdicts], "", "## Plots", ""]
    lines += [f"![{name}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def html_page(rows: Sequence[Row], verdicts: Sequence[str], task: str, images: Sequence[str]) -> str:
    table = table_rows(rows)
    cells = "".join("<th>" + html.escape(c) + "</th>" for c in table[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table[1:])
    items = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts)
    pictures = "".join(f'<img src="{html.escape(name)}" alt="{html.escape(name)}">' for name in images)
    note = "".join(f"<p>{html.escape(text.strip())}</p>" for text in notes(rows))
    return (f"<!doctype html><meta charset='utf-8'><title>Turnout variant comparison</title>"
            f"<h1>Variant comparison (accuracy: {html.escape(task)})</h1><table border='1'><tr>{cells}</tr>"
            f"{body}</table>{note}<h2>Verdicts</h2><ul>{items}</ul><h2>Plots</h2>{pictures}\n")  # fmt: skip


def compare(
    variants: Sequence[str],
    load: Sequence[Path],
    evals: Sequence[Path],
    out: Path,
    task: str = "addition",
    baseline: str | None = None,
    budget_pt: float = 1.0,
) -> str:
    """Write report.md, report.html and the plots into ``out``; returns the markdown."""
    if not variants:
        raise ValueError("--variants: name at least one variant")
    if not load and not evals:
        raise ValueError("nothing to compare: give --load and/or --eval run folders")
    loads, eval_runs = read_runs(load, evals)
    measured_variants = {name for run in loads for name in run["per_variant"] if name != "?"} | {
        name for run in eval_runs for name in (run["model"], *run.get("variants", {}))
    }
    missing = [v for v in variants if v not in measured_variants]

    split = {run["model"]: sorted(_served(run)) for run in eval_runs if len(_served(run)) > 1}
    for name in variants:  # a split route's figures are no variant's: its variants have theirs
        measured_as_variant = any(_eval_of(name, run)[0] is not None for run in eval_runs) or any(
            name in run["per_variant"] for run in loads
        )
        if name in split and not measured_as_variant:
            raise ValueError(
                f"--variants: {name} is a route split between {', '.join(split[name])}; "
                "name its variants, each scored on the prompts it served"
            )
    if missing:
        raise ValueError(
            f"--variants: no run measured {', '.join(missing)}; the runs measured "
            f"{', '.join(sorted(measured_variants)) or 'nothing'}"
        )
    if baseline is not None and baseline not in variants:
        raise ValueError(f"--baseline {baseline!r} is not one of --variants ({', '.join(variants)})")
    measured = sorted({name for run in eval_runs for name in run["tasks"]})
    if eval_runs and task not in measured:
        raise ValueError(f"--task {task!r}: the eval runs measured {', '.join(measured) or 'no task'}")
    # A bad $TURNOUT_PRICES_FILE raises a PricesError (a ValueError) naming it.
    catalog = accelerators.priced_catalog()
    rows = [join(v, loads, eval_runs, task, catalog) for v in variants]
    base = next(r for r in rows if r.variant == (baseline or variants[0]))
    verdicts = [verdict(r, base, budget_pt) for r in rows]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out}: {exc.strerror}") from None
    images = plots(rows, out)
    text = markdown(rows, verdicts, task, images)
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(html_page(rows, verdicts, task, images))
    return text
