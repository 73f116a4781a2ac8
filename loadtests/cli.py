"""``turnout loadtest`` and ``turnout loadtest compare``: argparse in front of the runner and the reports.

``turnout loadtest --target URL --route NAME --scenario steady --users 16 --duration 60s --out DIR``
runs locust headless (``loadtests.runner``); ``turnout loadtest compare DIR1 DIR2 … [--png F]``
prints the runs side by side and writes a chart (``loadtests.report``).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'turnout[loadtest]'"


def duration(text: str) -> float:
    """``90``, ``90s``, ``2m``, ``1h`` → seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 2m)") from None
    if not math.isfinite(seconds):  # inf or nan would make a run without end
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (a run is bounded: e.g. 30s, 2m)")
    return seconds


def register(commands: Any) -> None:
    run = commands.add_parser(
        "loadtest",
        help="load-test a gateway with locust (`turnout loadtest compare DIR…` to compare runs)",
        description="Drive ROUTE on TARGET with locust, headless and bounded by --duration, and "
        "write summary.json and summary.md (latency, time to first token, tokens/s, errors, SLO) "
        "to OUT. 'turnout loadtest compare DIR…' prints runs side by side and draws a chart.",
    )
    run.add_argument("--target", required=True, help="gateway base URL, e.g. http://127.0.0.1:8000")
    run.add_argument("--route", required=True, help="the model name to request")
    run.add_argument("--scenario", choices=("steady", "ramp", "spike", "soak"), default="steady")
    run.add_argument("--users", type=int, default=16, help="simulated users (ramp: the most)")
    run.add_argument(
        "--duration", type=duration, default=60.0, help="bound of the run, in whole seconds (default 60s)"
    )
    run.add_argument("--out", type=Path, required=True, help="folder for the run's files")
    run.add_argument(
        "--endpoint",
        choices=("chat", "completions", "responses", "embeddings"),
        default="chat",
        help="the API to drive (embeddings: one input of --prompt-tokens per request, never streamed)",
    )
    run.add_argument("--no-stream", action="store_true", help="ask for whole answers (default: stream)")
    run.add_argument("--prompt-tokens", default="8", help="N or LO-HI (uniform), default 8")
    run.add_argument("--max-tokens", default="16", help="N or LO-HI (uniform), default 16")
    run.add_argument("--trace", type=Path, help="JSONL of {prompt_tokens, max_tokens} to draw from")
    run.add_argument("--variant", help="pin a variant (x-turnout-variant request header)")
    run.add_argument("--temperature", type=float, help="sampling temperature (default: the server's)")
    run.add_argument("--api-key", help="client key (Authorization: Bearer …)")
    run.add_argument("--step-users", type=int, default=2, help="ramp: users added per step")
    run.add_argument(
        "--step", type=duration, default=5.0, help="ramp: step length, ≤ --duration (default 5s)"
    )
    run.add_argument("--slo-p95-ttft-ms", type=float, default=1000.0, help="ramp SLO (default 1000)")
    run.add_argument(
        "--slo-max-error-rate",
        type=float,
        default=0.01,
        help="ramp: the SLO's error bound; other scenarios exit 1 above it (default 0.01)",
    )
    run.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    run.add_argument("--seed", type=int, default=0)


def _run(args: argparse.Namespace) -> int:
    import importlib.util

    # Only look: importing locust here would monkey-patch this process with gevent.
    if importlib.util.find_spec("locust") is None:
        print(f"turnout: loadtest needs locust: {INSTALL_HINT}", file=sys.stderr)
        return 2
    from loadtests.runner import LoadTest, run
    from loadtests.scenarios import Scenario
    from loadtests.shapes import ShapeError, parse_shape
    from loadtests.stats import Slo

    wrong = [
        message
        for message, bad in (
            ("--users must be ≥ 1", args.users < 1),
            ("--duration must be > 0", args.duration <= 0),
            ("--step-users must be ≥ 1", args.step_users < 1),
            ("--step must be > 0", args.step <= 0),
            (
                f"--step {args.step:g}s is longer than --duration {args.duration:g}s: a ramp's first step "
                "would never end, so nothing would be judged",
                args.scenario == "ramp" and args.step > args.duration,
            ),
            ("--timeout must be > 0", args.timeout <= 0),
            ("--slo-max-error-rate must be within 0..1", not 0 <= args.slo_max_error_rate <= 1),
        )
        if bad
    ]
    if wrong:
        print(f"turnout: {'; '.join(wrong)}", file=sys.stderr)
        return 2
    try:
        shape = parse_shape(args.prompt_tokens, args.max_tokens, args.trace)
    except (ShapeError, OSError) as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    test = LoadTest(
        target=args.target.rstrip("/"),
        route=args.route,
        out=args.out,
        scenario=Scenario(args.scenario, args.users, args.duration, args.step_users, args.step),
        shape=shape,
        endpoint=args.endpoint,
        stream=not args.no_stream and args.endpoint != "embeddings",
        variant=args.variant,
        temperature=args.temperature,
        slo=Slo(args.slo_p95_ttft_ms, args.slo_max_error_rate),
        timeout_s=args.timeout,
        seed=args.seed,
        api_key=args.api_key,
    )
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"turnout: --out {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    # SIGTERM (a CI job's timeout, a supervisor) ends the run as Ctrl-C does: through the
    # runner's cleanup, which kills locust, instead of leaving it loading the target alone.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        summary = run(test)
    except RuntimeError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 1
    print((args.out / "summary.md").read_text())
    failed = run_failed(summary["overall"], args.scenario, args.slo_max_error_rate)
    if failed:
        print(f"turnout: {failed}", file=sys.stderr)
        return 1
    return 0


def run_failed(overall: dict[str, Any], scenario: str, max_error_rate: float) -> str | None:
    """Why a finished run should exit 1 (a CI job's gate), or None.

    No request at all, or every one failed: a dead target or a wrong route, not a load test.
    Otherwise a steady, spike or soak run fails when more than ``max_error_rate`` of its requests
    failed, as locust itself exits 1 on failures, or when any got no answer at all: a gateway
    sheds load with a status (429, 503), so a refused or reset connection means it went down,
    and its users back off meanwhile (``loadtests/locustfile.py``), so such requests are few
    beside the ones before the fall and no rate would show it. A ramp is meant to go past what
    the target holds, so its errors are its finding (the knee), not a failure of the run."""
    requests, errors = overall["requests"], overall["errors"]
    kinds = ", ".join(f"{kind} {count}" for kind, count in overall["errors_by_kind"].items())
    unanswered = overall["errors_by_kind"].get("connection", 0)
    if not requests:
        return "no request finished"
    if errors == requests:
        return f"every request failed ({kinds}){_first_said(overall)}"
    if scenario != "ramp" and unanswered:
        return (
            f"{unanswered} of {requests} requests got no answer at all (connection refused or reset: "
            f"the target went down or dropped them; errors: {kinds})"
        )
    if scenario != "ramp" and errors / requests > max_error_rate:
        return (
            f"{errors} of {requests} requests failed ({errors / requests:.1%}: {kinds}), "
            f"above --slo-max-error-rate {max_error_rate:.1%}" + _first_said(overall)
        )
    return None


def _first_said(overall: dict[str, Any]) -> str:
    """What the most common kind of error said first (a run's 400s name their reason)."""
    kinds, examples = overall["errors_by_kind"], overall.get("error_examples") or {}
    said = [kind for kind in sorted(kinds, key=lambda k: -kinds[k]) if kind in examples]
    return f"; the first {said[0]} said: {examples[said[0]]}" if said else ""


def compare_main(argv: list[str]) -> int:
    """``turnout loadtest compare DIR… [--png FILE]``."""
    parser = argparse.ArgumentParser(prog="turnout loadtest compare", description="compare load-test runs")
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with summary.json)")
    parser.add_argument("--png", type=Path, help="chart file (default: compare.png next to the first run)")
    args = parser.parse_args(argv)
    from loadtests.report import compare_chart, compare_table, load_summary, run_labels

    try:
        summaries = [(folder, load_summary(folder)) for folder in args.runs]
        runs = list(zip(run_labels(summaries), (summary for _, summary in summaries), strict=True))
    except ValueError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    print(compare_table(runs))
    png = args.png or args.runs[0].parent / "compare.png"
    try:
        compare_chart(runs, png)
    except ImportError:
        print("turnout: the chart needs matplotlib: pip install 'turnout[report]'", file=sys.stderr)
        return 2
    print(f"chart: {png}")
    return 0


def run(args: argparse.Namespace) -> int:
    return _run(args)
