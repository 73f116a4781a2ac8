"""``turnout plan`` and ``turnout deploy …``: check and size a variant spec before launch.

Off the request path: operator commands, hooked into ``serving.cli`` by ``register`` (argparse
only, so ``turnout --help`` stays fast) and ``run`` (which imports the deploy modules lazily).

- ``turnout plan SPEC [--accelerators a,b] [--context N] [--prices FILE] [--png OUT] [--json]``:
  the spec planned on each accelerator (default: the whole catalog). Prices come from ``--prices``,
  else the file in ``$TURNOUT_PRICES_FILE``, else the catalog defaults.
- ``turnout deploy validate SPEC``: ``ok: NAME (ID)``, or the problems and exit status 1 (a
  model it cannot read, ``model.path`` or ``model.architecture``, is exit 2, as for ``plan``).
- ``turnout deploy render SPEC --target vllm|trtllm|triton|ray|k8s --out DIR``: the target's
  files (``deploy.render``) written under DIR, one path per line; a spec that would not deploy is
  refused with its problems (exit 1), a target its engine has no use for with the targets it has,
  and a spec the target cannot render with the reason (exit 2, no traceback).

Exit status: 0 ok, 1 the spec is valid but would not deploy (validate, render), 2 an unreadable or
malformed spec, prices file or argument (the message names file, field and reason).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

COMMANDS = ("plan", "deploy")
RENDER_TARGETS = ("vllm", "trtllm", "triton", "ray", "k8s")  # deploy.render.TARGETS (not imported here)
PRICES_ENV = "TURNOUT_PRICES_FILE"  # the same name as deploy.accelerators.PRICES_ENV


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` and ``deploy`` (with ``validate``) to the ``turnout`` parser."""
    plan = commands.add_parser(
        "plan", help="size a variant spec on each accelerator (fits, KV cache, rooflines, cost)"
    )
    plan.add_argument("spec", type=Path, help="variant spec YAML")
    plan.add_argument(
        "--accelerators", help="comma-separated catalog names (default: every accelerator in the catalog)"
    )
    plan.add_argument("--context", type=int, help="tokens per sequence (default: the spec's max_model_len)")
    plan.add_argument(
        "--prices",
        type=Path,
        help=f"YAML of accelerator name → USD per device-hour (default: ${PRICES_ENV}, else the catalog)",
    )
    plan.add_argument("--png", type=Path, help="also write a bar chart here (needs turnout[report])")
    plan.add_argument("--json", action="store_true", help="print JSON instead of the table")
    deploy = commands.add_parser("deploy", help="variant specs: validate and render (before launch)")
    sub = deploy.add_subparsers(dest="deploy_command", required=True)
    validate = sub.add_parser("validate", help="check a variant spec: parallelism, support, memory fit")
    validate.add_argument("spec", type=Path, help="variant spec YAML")
    render = sub.add_parser("render", help="write an engine's or platform's config files for a variant spec")
    render.add_argument("spec", type=Path, help="variant spec YAML")
    render.add_argument(
        "--target", required=True, choices=RENDER_TARGETS, help="what to render (see deploy.render)"
    )
    render.add_argument("--out", type=Path, required=True, help="folder to write into (made if missing)")


def _fail(message: str) -> int:
    print(f"turnout: {message}", file=sys.stderr)
    return 2


def _plan(args: argparse.Namespace) -> int:
    from deploy import accelerators
    from deploy.plan_table import as_json, format_table, plan_all
    from deploy.spec import SpecError, load_spec

    if args.context is not None and args.context < 1:
        return _fail("--context: expected a positive number of tokens")
    try:
        catalog = accelerators.priced_catalog(args.prices)
        spec = load_spec(args.spec)
        wanted = [n.strip() for n in args.accelerators.split(",") if n.strip()] if args.accelerators else None
        chosen = [accelerators.get(name, catalog) for name in wanted] if wanted else list(catalog.values())
        longest = spec.max_model_len()
        if args.context is not None and args.context > longest:
            return _fail(f"--context: {args.context} exceeds the spec's max_model_len {longest}")
        rows = plan_all(spec, chosen, args.context, catalog)
    except (SpecError, accelerators.PricesError) as exc:
        return _fail(str(exc))
    except accelerators.UnknownAccelerator as exc:
        return _fail(f"--accelerators: {exc}")
    print(json.dumps(as_json(spec, rows), indent=2) if args.json else format_table(spec, rows))
    if args.png:
        from deploy.plan_chart import ChartUnavailable, write_chart

        try:
            title = f"{spec.name}: {spec.facts().name} at {rows[0].context} tokens"
            write_chart(rows, args.png, title, spec.task)
        except ChartUnavailable as exc:
            return _fail(str(exc))
        print(f"chart: {args.png}", file=sys.stderr)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from deploy.spec import SpecError, load_spec
    from deploy.validate import problems

    try:
        spec = load_spec(args.spec)
        found = problems(spec)  # SpecError too when the model's facts cannot be read
    except SpecError as exc:
        return _fail(str(exc))
    if not found:
        print(f"ok: {spec.name} ({spec.id})")
        return 0
    print(f"{args.spec}: {spec.name} ({spec.id}) would not deploy:")
    for problem in found:
        print(f"  {problem}")
    return 1


def _render(args: argparse.Namespace) -> int:
    from deploy.render import RenderError, remove_stale, render, write
    from deploy.spec import SpecError, load_spec
    from deploy.validate import problems

    try:
        spec = load_spec(args.spec)
        found = problems(spec)  # SpecError too when the model's facts cannot be read
    except SpecError as exc:
        return _fail(str(exc))
    if found:
        print(f"{args.spec}: {spec.name} ({spec.id}) would not deploy; nothing rendered:", file=sys.stderr)
        for problem in found:
            print(f"  {problem}", file=sys.stderr)
        return 1
    try:
        files = render(spec, args.target)
    except (RenderError, ImportError) as exc:  # ImportError: the target's optional package
        return _fail(f"{args.spec}: cannot render {args.target}: {exc}")
    try:
        written = write(files, args.out)
        stale = remove_stale(files, args.out, spec.name)
    except OSError as exc:
        return _fail(f"--out: cannot write {exc.filename}: {exc.strerror}")
    for path in written:
        print(path)
    for path in stale:
        print(f"removed {path}: an earlier render's, not part of this spec's", file=sys.stderr)
    count = f"{len(written)} file" + ("s" if len(written) != 1 else "")
    summary = f"rendered {args.target} for {spec.name} ({spec.id}): {count} in {args.out}"
    print(summary, file=sys.stderr)
    return 0


_DEPLOY_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {"validate": _validate, "render": _render}


def run(args: argparse.Namespace) -> int:
    """Run a command ``register`` added; returns the exit status."""
    if args.command == "plan":
        return _plan(args)
    if args.command == "deploy" and args.deploy_command in _DEPLOY_HANDLERS:
        return _DEPLOY_HANDLERS[args.deploy_command](args)
    return 2
