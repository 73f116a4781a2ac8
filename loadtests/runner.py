"""``turnout loadtest``: run locust headless against a gateway, then write the run's summary.

Off the request path; it drives a gateway from outside. Starts ``python -m locust`` on
``loadtests/locustfile.py`` (configured through ``$TURNOUT_LOADTEST``) in a subprocess bounded
by the scenario's duration, shows progress from the records file while it runs, and writes
into ``--out``: locust's CSV and HTML, ``records.jsonl`` (one line per request),
``summary.json`` (contract ``turnout.loadtest/1``) and ``summary.md``. Variant facts (engine,
vendor, accelerator) come from the gateway's ``turnout_variant_info`` gauge; ``request``
records how the requests were asked, so runs asking differently are not compared as alike.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadtests.report import summary_markdown
from loadtests.scenarios import Scenario
from loadtests.shapes import RequestShape
from loadtests.stats import Record, Slo, knee, pct, per_variant, stats

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
GRACE_S = 60.0  # locust start-up and stop-timeout on top of the scenario's own bound


@dataclass(frozen=True)
class LoadTest:
    target: str
    route: str
    out: Path
    scenario: Scenario
    shape: RequestShape = field(default_factory=RequestShape)
    endpoint: str = "chat"
    stream: bool = True
    variant: str | None = None
    temperature: float | None = None
    slo: Slo = field(default_factory=lambda: Slo(1000.0, 0.01))
    timeout_s: float = 60.0
    seed: int = 0
    api_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def variant_facts(target: str) -> dict[str, dict[str, str]]:
    """{variant: {kind, engine, vendor, accelerator}} from the gateway's /metrics (empty if unreachable)."""
    try:
        text = httpx.get(f"{target}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    found: dict[str, dict[str, str]] = {}
    wanted = "\n".join(line for line in text.split("\n") if line.startswith("turnout_variant_info"))
    for family in text_string_to_metric_families(wanted + "\n"):
        for sample in family.samples:
            labels = dict(sample.labels)
            name = labels.pop("variant", "?")
            found[name] = {k: labels.get(k, "") for k in ("kind", "engine", "vendor", "accelerator")}
    return found


class TargetUnreachable(RuntimeError):
    """No answer at all from the target (refused, reset, timed out); ``cause`` is the error."""

    def __init__(self, target: str, cause: httpx.HTTPError) -> None:
        super().__init__(f"cannot reach {target}: {cause}")
        self.cause = cause


def check_route(
    target: str, route: str, api_key: str | None, variant: str | None = None, *, models_required: bool = True
) -> None:
    """Before any load: the target must answer ``/v1/models`` and list ``route`` (a mistyped
    route made thousands of 404s over the whole run before), and with ``variant`` one pinned
    request must be taken (a variant the route does not use, or a key that may not pin, is a
    4xx for every request). RuntimeError says what is wrong; ``models_required=False`` lets a
    server without a model list pass (``turnout eval`` scores any OpenAI-compatible server)."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        reply = httpx.get(f"{target}/v1/models", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise TargetUnreachable(target, exc) from None
    if reply.status_code != 200 and not models_required:
        return
    if reply.status_code != 200:
        raise RuntimeError(f"{target}/v1/models answered {reply.status_code}: {reply.text[:300]}")
    try:
        served = [str(model["id"]) for model in reply.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return  # not an OpenAI model list: let the run say what it can
    if route not in served:
        raise RuntimeError(f"{target} does not serve the route {route!r}; it serves: {', '.join(served)}")
    if variant is None:
        return
    probe = {"model": route, "prompt": "1", "max_tokens": 1}
    reply = httpx.post(
        f"{target}/v1/completions", json=probe, headers={**headers, "x-turnout-variant": variant}, timeout=60
    )
    if 400 <= reply.status_code < 500:
        raise RuntimeError(f"--variant {variant}: {target} answered {reply.status_code}: {reply.text[:300]}")


def request_facts(test: LoadTest) -> dict[str, Any]:
    """How the run's requests were asked (summary.json's ``request``): a run asking 32 tokens and
    one asking 1 measure different things, so ``turnout compare`` draws no ratio between them."""
    shape = test.shape
    trace = None
    if shape.kind == "trace":
        digest = hashlib.sha256(json.dumps(shape.trace).encode()).hexdigest()[:16]
        trace = {"shapes": len(shape.trace), "sha256": digest}
    return {
        "shape": shape.kind,
        "prompt_tokens": None if trace else list(shape.prompt_tokens),
        "max_tokens": None if trace else list(shape.max_tokens),
        "trace": trace,
        "temperature": test.temperature,
        "variant": test.variant,
        "requested_duration_s": test.scenario.duration_s,
    }


def _read_records(path: Path) -> list[Record]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(Record.from_json(json.loads(line)))
    return rows


def _progress(path: Path, offset: int, seen: list[Record], elapsed: float, total: float, out: TextIO) -> int:
    """Read new records, print elapsed/total, req/s of the last 2 s and p95 TTFT of the last 5 s."""
    if path.exists():
        with path.open() as handle:
            handle.seek(offset)
            chunk = handle.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            offset += len(complete.encode())
        seen.extend(Record.from_json(json.loads(line)) for line in complete.splitlines() if line.strip())
    now = seen[-1].t if seen else 0.0
    span = min(2.0, now) or 1.0  # the first 2 s of a run are all it has had
    recent = [r for r in seen if r.t >= now - span]
    window = [r.ttft_ms or r.latency_ms for r in seen if r.t >= now - 5.0 and r.error is None]
    p95 = pct(window)["p95"]
    errors = sum(r.error is not None for r in seen)
    p95_text = f"{p95:.0f} ms" if p95 is not None else "-"
    out.write(
        f"\r[{elapsed:5.1f}/{total:.0f}s] {len(seen)} requests, {len(recent) / span:6.1f} req/s, "
        f"p95 TTFT {p95_text}, errors {errors}   "
    )
    out.flush()
    return offset


def run(test: LoadTest, out: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the load test; returns the summary it wrote."""
    check_route(test.target, test.route, test.api_key, test.variant)
    # What serves each variant, read before the run too: a gateway that died during it (what a
    # run can be for) no longer answers after, and its runs lost their accelerator and cost.
    facts_before = variant_facts(test.target)
    test.out.mkdir(parents=True, exist_ok=True)
    records_path, steps_path = test.out / "records.jsonl", test.out / "steps.json"
    records_path.unlink(missing_ok=True)
    steps_path.unlink(missing_ok=True)
    scenario = test.scenario
    config = {
        "route": test.route, "endpoint": test.endpoint, "stream": test.stream, "variant": test.variant,
        "temperature": test.temperature, "records": str(records_path), "steps_file": str(steps_path),
        "scenario": scenario.name, "users": scenario.users, "duration_s": scenario.duration_s,
        "step_users": scenario.step_users, "step_s": scenario.step_s, "timeout_s": test.timeout_s,
        "slo_p95_ttft_ms": test.slo.p95_ttft_ms, "slo_max_error_rate": test.slo.max_error_rate,
        "seed": test.seed, "api_key": test.api_key,
        "shape": {"kind": test.shape.kind, "prompt_tokens": test.shape.prompt_tokens,
                  "max_tokens": test.shape.max_tokens, "trace": test.shape.trace},
    }  # fmt: skip
    cmd = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", test.target,
        "--csv", str(test.out / "locust"), "--html", str(test.out / "locust.html"),
        "--stop-timeout", "5", "--loglevel", "WARNING", "--only-summary",
    ]  # fmt: skip
    env = {**os.environ, "TURNOUT_LOADTEST": json.dumps(config)}
    started_at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    begin = time.monotonic()
    with (test.out / "locust.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        seen: list[Record] = []
        offset = 0
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - begin
                if elapsed > scenario.duration_s + GRACE_S:
                    proc.kill()
                    break
                offset = _progress(records_path, offset, seen, elapsed, scenario.duration_s, out)
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    out.write("\n")
    records = _read_records(records_path)
    if not records:
        log_path = test.out / "locust.log"
        raise RuntimeError(f"locust recorded no request (exit {proc.returncode}); see {log_path}")
    seconds = max(r.t for r in records) - min(r.t - r.latency_ms / 1000 for r in records)
    steps = json.loads(steps_path.read_text()) if steps_path.exists() else []
    summary = {
        "schema": "turnout.loadtest/1",
        "target": test.target, "route": test.route, "scenario": scenario.name,
        "endpoint": test.endpoint, "stream": test.stream, "users": scenario.users,
        "duration_s": round(seconds, 3), "started_at": started_at, "request": request_facts(test),
        "overall": stats(records, seconds),
        "per_variant": per_variant(records, seconds),
        "variants": {**facts_before, **variant_facts(test.target)},
        "knee": knee(steps, test.slo) if scenario.name == "ramp" else None,
    }  # fmt: skip
    (test.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (test.out / "summary.md").write_text(summary_markdown(summary))
    return summary
