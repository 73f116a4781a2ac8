"""``turnout eval``: measure a route or variant through the gateway's OpenAI API, as clients see it.

Off the request path: an HTTP client of the gateway (bounded concurrency, a progress bar).
Generation tasks send each prompt greedily (temperature 0) to ``/v1/completions`` (or chat,
``chat=True``) and score the answer (``evals.metrics``); with a ``reference`` model every
prompt is also sent there and the exact-output agreement is measured (e.g. int4 vs fp32).
Accuracy and agreement get percentile bootstrap 95% intervals. Writes ``summary.json``
(contract ``turnout.eval/1``), ``records.jsonl`` and ``summary.md`` into ``out``.

Log-likelihood tasks score text with ``/v1/completions`` (``echo``, ``logprobs: 0``,
``max_tokens: 0``): ``text`` gives the perplexity of held-out sentences (per token, the first
token of each sentence excluded), ``choice`` picks the choice whose tokens (those past the
prompt, by ``text_offset``) have the highest summed logprob.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from tqdm import tqdm

from evals.datasets import Dataset, shipped
from evals.metrics import Scoring, bootstrap_ci, match, mean, wilson_ci
from evals.report import split_reference
from loadtests.runner import TargetUnreachable, check_route, variant_facts

Result = TypeVar("Result")

# task → (dataset, scoring, max_tokens). max_tokens leaves every reference answer room, with a
# margin (tests/unit/test_evals_pure.py checks it with the shipped model's tokenizer): the longest
# continuation, cont-0048's " 35 36 37 38 39 40.", is 19 tokens, which 16 cut off.
GENERATION_TASKS: dict[str, tuple[str, Scoring, int]] = {
    "addition": ("addition", "exact", 4),
    "continuation": ("continuation", "normalized", 32),
}
LOGLIKELIHOOD_TASKS = ("text", "choice")
TASKS = (*GENERATION_TASKS, *LOGLIKELIHOOD_TASKS)


class EvalError(RuntimeError):
    """An eval that cannot run as asked; the message says why."""


@dataclass(frozen=True)
class EvalRun:
    target: str
    model: str
    tasks: tuple[str, ...]
    out: Path
    reference: str | None = None
    concurrency: int = 8
    limit: int | None = None
    chat: bool = False
    api_key: str | None = None
    seed: int = 0


async def _generate(
    client: httpx.AsyncClient, run: EvalRun, model: str, prompt: str, max_tokens: int
) -> tuple[str, str]:
    """(answer text, variant that served it)."""
    if run.chat:
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
        path = "/v1/chat/completions"
    else:
        body, path = {"model": model, "prompt": prompt}, "/v1/completions"
    body.update(max_tokens=max_tokens, temperature=0)
    reply = await client.post(path, json=body)
    if reply.status_code != 200:
        raise EvalError(f"{model}: {path} answered {reply.status_code}: {reply.text[:300]}")
    try:
        choice = reply.json()["choices"][0]
        text = (choice["message"]["content"] if run.chat else choice["text"]) or ""  # null: no text
    except (ValueError, LookupError, TypeError) as exc:  # a 200 that is no OpenAI answer
        why = f"{model}: {path} answered 200 without a completion ({_why(exc)})"
        raise EvalError(f"{why}: {reply.text[:300]}") from None
    return str(text), reply.headers.get("x-turnout-variant", "?")


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _all(work: Iterable[Coroutine[Any, Any, Result]]) -> list[Result]:
    """Every result in order; on the first failure the others are cancelled and awaited before
    it is raised (``gather`` left them running into the client's close: stray warnings)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one) for one in work]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


async def _task(client: httpx.AsyncClient, run: EvalRun, task: str, bar: tqdm) -> list[dict[str, Any]]:
    dataset_name, scoring, max_tokens = GENERATION_TASKS[task]
    dataset: Dataset = shipped()[dataset_name]
    rows = dataset.rows[: run.limit] if run.limit else dataset.rows
    gate = asyncio.Semaphore(run.concurrency)

    async def one(row: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            output, variant = await _generate(client, run, run.model, row["prompt"], max_tokens)
            record = {"task": task, "dataset": dataset.label, "id": row["id"], "prompt": row["prompt"],
                      "expected": row["answer"], "output": output, "variant": variant,
                      "correct": match(output, row["answer"], scoring)}  # fmt: skip
            if run.reference:
                reference, served = await _generate(client, run, run.reference, row["prompt"], max_tokens)
                record.update(reference_output=reference, reference_variant=served)
                record["agree"] = output == reference
            bar.update(1)
            return record

    return await _all(one(row) for row in rows)


async def _logprobs(
    client: httpx.AsyncClient, model: str, text: str, top: int = 0
) -> tuple[list[float], list[int], str, list[str]]:
    """(token logprobs without the first, their offsets, variant, top-1 tokens if ``top``) of ``text``."""
    body = {"model": model, "prompt": text, "max_tokens": 0, "echo": True, "logprobs": top}
    reply = await client.post("/v1/completions", json=body)
    if reply.status_code != 200:
        raise EvalError(f"{model}: scoring answered {reply.status_code}: {reply.text[:300]}")
    try:
        block = reply.json()["choices"][0]["logprobs"] or {}
        lead = echoed_extras(block["tokens"], text)
        shift = sum(len(token) for token in block["tokens"][:lead])
        first = lead + 1  # the text's first token has no logprob of its own here
        tops = block["top_logprobs"][first:] if top else []
        best = [max(alternatives, key=alternatives.get) for alternatives in tops]
        offsets = [at - shift for at in block["text_offset"][first:]]
        logprobs = block["token_logprobs"][first:]
    except (ValueError, LookupError, TypeError) as exc:  # a 200 that is no OpenAI answer with logprobs
        why = f"{model}: scoring answered 200 without echoed logprobs ({_why(exc)})"
        raise EvalError(f"{why}: {reply.text[:300]}") from None
    return logprobs, offsets, reply.headers.get("x-turnout-variant", "?"), best


def echoed_extras(tokens: list[str], text: str) -> int:
    """How many leading echoed tokens are not part of ``text``: a BOS the server lists.

    vLLM echoes a text prompt with ``<s>`` first (its ``text_offset`` counting those characters
    too); Turnout's embedded engine leaves the BOS out. Dropping it makes both score the same
    tokens (each sentence's first token excluded) at offsets into ``text``.
    """
    for lead in range(min(3, len(tokens))):
        if "".join(tokens[lead:]) == text:
            return lead
    return 0


async def _loglikelihood_task(
    client: httpx.AsyncClient, run: EvalRun, task: str, bar: tqdm
) -> list[dict[str, Any]]:
    dataset: Dataset = shipped()[task]
    rows = dataset.rows[: run.limit] if run.limit else dataset.rows
    gate = asyncio.Semaphore(run.concurrency)

    async def one(row: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            record: dict[str, Any] = {"task": task, "dataset": dataset.label, "id": row["id"]}
            if task == "text":
                scores, _, variant, _ = await _logprobs(client, run.model, row["text"])
                record.update(nll=-sum(scores), tokens=len(scores), variant=variant)
            else:
                sums, start = [], len(row["prompt"])
                for choice in row["choices"]:
                    scores, offsets, variant, _ = await _logprobs(client, run.model, row["prompt"] + choice)
                    sums.append(sum(s for s, at in zip(scores, offsets, strict=True) if at >= start))
                picked = max(range(len(sums)), key=sums.__getitem__)
                correct = picked == row["answer"]
                record.update(picked=picked, expected=row["answer"], correct=correct, variant=variant)
            bar.update(1)
            return record

    return await _all(one(row) for row in rows)


async def _top1_agreement(client: httpx.AsyncClient, run: EvalRun, bar: tqdm) -> list[dict[str, Any]]:
    """Per held-out sentence: at how many positions the model's top-1 next token is the reference's."""
    assert run.reference is not None
    rows = shipped()["text"].rows[: run.limit or 100]
    gate = asyncio.Semaphore(run.concurrency)

    async def one(row: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            _, _, variant, mine = await _logprobs(client, run.model, row["text"], top=1)
            _, _, served, theirs = await _logprobs(client, run.reference or "", row["text"], top=1)
            bar.update(1)
            agreed = sum(a == b for a, b in zip(mine, theirs, strict=True))
            record = {"task": "top1", "id": row["id"], "agreed": agreed, "positions": len(mine)}
            return {**record, "variant": variant, "reference_variant": served}

    return await _all(one(row) for row in rows)


def _pooled(records: list[dict[str, Any]], seed: int, value: Any, resamples: int = 2000) -> dict[str, Any]:
    """``value(records)`` with a 95% interval from resampling the records (sentences) themselves."""
    import random

    n = len(records)
    if not n:  # nothing measured: no figure (a 0.0 read as "no agreement at all")
        return {"value": None, "ci95": None, "n": 0}
    rng = random.Random(seed)
    draws = sorted(value([records[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    low, high = draws[int(0.025 * resamples)], draws[min(resamples - 1, int(0.975 * resamples))]
    return {"value": value(records), "ci95": [low, high], "n": n}


def _interval(values: list[float], seed: int) -> dict[str, Any]:
    if not values:  # nothing measured (agreement asked for with log-likelihood tasks only): no 0%
        return {"value": None, "ci95": None, "n": 0}
    if all(v in (0.0, 1.0) for v in values):  # right or wrong: a proportion's own interval
        low, high = wilson_ci(int(sum(values)), len(values))
    else:
        low, high = bootstrap_ci(values, seed)
    return {"value": mean(values), "ci95": [low, high], "n": len(values)}


def _perplexity(records: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """exp(NLL per token) over all tokens; the 95% interval from resampling whole sentences."""
    import math

    def pooled(chosen: list[dict[str, Any]]) -> float:
        tokens = sum(r["tokens"] for r in chosen)
        return math.exp(sum(r["nll"] for r in chosen) / tokens) if tokens else 0.0

    return _pooled(records, seed, pooled)


def _top1(records: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    def share(chosen: list[dict[str, Any]]) -> float:
        positions = sum(r["positions"] for r in chosen)
        return sum(r["agreed"] for r in chosen) / positions if positions else 0.0

    return _pooled(records, seed, share)


def _scores(run: EvalRun, records: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(figures per task, agreement with the reference or None) of ``records`` (pure)."""
    tasks: dict[str, Any] = {}
    for task in run.tasks:
        chosen = [r for r in records if r["task"] == task]
        dataset = chosen[0]["dataset"] if chosen else ""
        if task == "text":
            tasks[task] = {"metric": "perplexity", "dataset": dataset, **_perplexity(chosen, run.seed)}
            continue
        metric = "accuracy" if task == "choice" else f"{GENERATION_TASKS[task][1]}_match"
        tasks[task] = {"metric": metric, "dataset": dataset,
                       **_interval([float(r["correct"]) for r in chosen], run.seed)}  # fmt: skip
    agreement = None
    if run.reference:
        agreed = [float(r["agree"]) for r in records if "agree" in r]
        top1 = [r for r in records if r["task"] == "top1"]
        # Which variants answered as the reference: more than one when it is a split route.
        served = sorted({r["reference_variant"] for r in records if "reference_variant" in r})
        agreement = {"reference": run.reference, "reference_variants": served,
                     "exact_output_agreement": _interval(agreed, run.seed + 1),
                     "top1_token_agreement": _top1(top1, run.seed + 2)}  # fmt: skip
    return tasks, agreement


def summarize(
    run: EvalRun, records: list[dict[str, Any]], facts: dict[str, Any], started: str
) -> dict[str, Any]:
    """The ``turnout.eval/1`` summary of ``records`` (pure).

    When the model is a split route (its records name more than one serving variant, from
    ``x-turnout-variant``), ``per_variant`` holds each variant's figures from the records it
    served alone: the run's own figures are the mix, no one variant's.
    """
    tasks, agreement = _scores(run, records)
    seen = sorted({r["variant"] for r in records})
    summary = {
        "schema": "turnout.eval/1", "target": run.target, "model": run.model, "started_at": started,
        "variants": {v: facts.get(v, {}) for v in seen}, "tasks": tasks, "agreement": agreement,
    }  # fmt: skip
    if len(seen) > 1:
        per_variant = {}
        for variant in seen:
            served = [r for r in records if r["variant"] == variant]
            mine, agreed = _scores(run, served)
            present = {r["task"] for r in served}
            per_variant[variant] = {"tasks": {t: f for t, f in mine.items() if t in present},
                                    "agreement": agreed}  # fmt: skip
        summary["per_variant"] = per_variant
    return summary


def summary_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Eval: {summary['model']} ({', '.join(summary['variants'])})", "",
             "| task | metric | value | 95% CI | n |", "|---|---|---:|---|---:|"]  # fmt: skip
    for task, figures in summary["tasks"].items():
        if not figures["n"]:
            lines.append(f"| {task} | {figures['metric']} | - | - | 0 |")
            continue
        low, high = figures["ci95"]
        if figures["metric"] == "perplexity":
            value, interval = f"{figures['value']:.3f}", f"{low:.3f}–{high:.3f}"
        else:
            value, interval = f"{figures['value']:.1%}", f"{low:.1%}–{high:.1%}"
        lines.append(f"| {task} | {figures['metric']} | {value} | {interval} | {figures['n']} |")
    agreement = summary.get("agreement")
    if agreement:
        lines.append("")
        kinds = (("exact_output_agreement", "Exact-output"), ("top1_token_agreement", "Top-1 token"))
        for key, label in kinds:
            figures = agreement[key]
            if figures and figures["n"]:
                low, high = figures["ci95"]
                lines.append(f"{label} agreement with {agreement['reference']}: {figures['value']:.1%} "
                             f"({low:.1%}–{high:.1%}, n={figures['n']})  ")  # fmt: skip
        mixed = split_reference(agreement)
        if mixed:
            lines += ["", f"**{agreement['reference']} is a split route**: its answers came from "
                      f"{', '.join(mixed)}, so the agreement is with that mix, not one variant. "
                      "Name one variant (or a route with one target) as `--reference`."]  # fmt: skip
    return "\n".join(lines) + "\n"


async def _run(run: EvalRun) -> list[dict[str, Any]]:
    headers = {"authorization": f"Bearer {run.api_key}"} if run.api_key else {}

    def size(task: str) -> int:
        name = GENERATION_TASKS[task][0] if task in GENERATION_TASKS else task
        return len(shipped()[name].rows[: run.limit or None])

    total = sum(size(task) for task in run.tasks)
    if run.reference:
        total += len(shipped()["text"].rows[: run.limit or 100])
    async with httpx.AsyncClient(base_url=run.target, timeout=120, headers=headers) as client:
        with tqdm(total=total, desc=f"eval {run.model}", unit="prompt") as bar:
            records: list[dict[str, Any]] = []
            for task in run.tasks:
                if task in GENERATION_TASKS:
                    records += await _task(client, run, task, bar)
                else:
                    records += await _loglikelihood_task(client, run, task, bar)
            if run.reference:
                records += await _top1_agreement(client, run, bar)
    return records


def run_eval(run: EvalRun) -> dict[str, Any]:
    if not run.tasks:
        raise EvalError(f"--tasks: name at least one of: {', '.join(TASKS)}")
    for task in run.tasks:
        if task not in TASKS:
            raise EvalError(f"unknown task {task!r}; expected one of: {', '.join(TASKS)}")
    if run.concurrency < 1:
        raise EvalError(f"--concurrency must be at least 1, got {run.concurrency}")
    if run.limit is not None and run.limit < 1:
        raise EvalError(f"--limit must be at least 1 (leave it out for every example), got {run.limit}")
    for name, flag in ((run.model, "--model"), (run.reference, "--reference")):
        if name:  # before any prompt: a mistyped name was a raw 404 body after the progress bar
            try:
                check_route(run.target, name, run.api_key, models_required=False)
            except TargetUnreachable as exc:
                raise EvalError(f"--target {run.target}: {type(exc.cause).__name__}: {exc.cause}") from None
            except RuntimeError as exc:
                raise EvalError(f"{flag} {name}: {exc}") from None
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        records = asyncio.run(_run(run))
    except httpx.TransportError as exc:  # refused, reset, timed out: no traceback for a wrong --target
        raise EvalError(f"--target {run.target}: {type(exc).__name__}: {exc}") from None
    summary = summarize(run, records, variant_facts(run.target), started)
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (run.out / "summary.md").write_text(summary_markdown(summary))
    return summary
