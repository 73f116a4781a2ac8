"""``turnout eval`` and ``turnout compare``: argparse in front of ``evals.runner`` and ``evals.report``.

``turnout eval --target URL --model NAME [--tasks addition,continuation] [--reference MODEL] --out DIR``
measures accuracy through the API; ``turnout compare --variants A,B --load DIR… --eval DIR… --out DIR``
joins load and eval runs into one report with a verdict per variant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    run = commands.add_parser(
        "eval",
        help="measure accuracy through the gateway's API",
        description="Run the evaluation tasks against MODEL through TARGET's OpenAI API and write "
        "summary.json, summary.md and records.jsonl to OUT; with --reference, also the "
        "exact-output agreement with another model. 'turnout compare' joins eval and load-test "
        "runs into one report.",
    )
    run.add_argument("--target", required=True, help="gateway base URL, e.g. http://127.0.0.1:8000")
    run.add_argument("--model", required=True, help="the route or variant to evaluate")
    run.add_argument(
        "--tasks",
        default="addition,continuation",
        # the names evals.runner.TASKS holds (not imported here: `turnout --help` stays quick)
        help="comma-separated, of: addition, continuation, text, choice (default: addition,continuation)",
    )
    run.add_argument("--reference", help="a model to measure exact-output agreement against")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--concurrency", type=int, default=8)
    run.add_argument("--limit", type=int, help="first N examples of each task")
    run.add_argument("--chat", action="store_true", help="ask through /v1/chat/completions")
    run.add_argument("--api-key")
    run.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    compare = commands.add_parser(
        "compare",
        help="join load and eval runs into one report",
        description="Join 'turnout loadtest' and 'turnout eval' run folders into one report "
        "(report.md, report.html and plots) with a verdict per variant against the baseline.",
    )
    compare.add_argument("--variants", required=True, help="comma-separated variant names")
    compare.add_argument("--load", type=Path, nargs="*", default=[], help="turnout loadtest run folders")
    compare.add_argument("--eval", type=Path, nargs="*", default=[], help="turnout eval run folders")
    compare.add_argument("--out", type=Path, required=True)
    compare.add_argument("--task", default="addition", help="the accuracy figure to compare")
    compare.add_argument("--baseline", help="variant the others are judged against (default: first)")
    compare.add_argument("--accuracy-budget-pt", type=float, default=1.0, help="allowed accuracy loss")


def parse_tasks(text: str) -> tuple[str, ...]:
    """``--tasks a,b,a`` → ``("a", "b")``: in order, each once (a repeated task was scored twice)."""
    return tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def _eval(args: argparse.Namespace) -> int:
    from evals.runner import EvalError, EvalRun, run_eval

    tasks = parse_tasks(args.tasks)
    run = EvalRun(args.target.rstrip("/"), args.model, tasks, args.out, args.reference, args.concurrency,
                  args.limit, args.chat, args.api_key, args.seed)  # fmt: skip
    try:
        run_eval(run)
    except EvalError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    print((args.out / "summary.md").read_text())
    return 0


def _compare(args: argparse.Namespace) -> int:
    from evals.report import compare

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        text = compare(variants, args.load, args.eval, args.out, args.task, args.baseline,
                       args.accuracy_budget_pt)  # fmt: skip
    except ValueError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("turnout: the plots need matplotlib: pip install 'turnout[report]'", file=sys.stderr)
        return 2
    print(text)
    return 0


def run(args: argparse.Namespace) -> int:
    return _eval(args) if args.command == "eval" else _compare(args)
