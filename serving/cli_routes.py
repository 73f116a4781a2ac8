"""``turnout routes …``: read and change the routes of a running gateway through its admin API.

Off the request path: an operator's HTTP client (httpx, sync) of ``/admin/*`` on a gateway.
Every change is read-modify-write: GET the route, edit its spec locally with the pydantic
models of ``serving.routing.spec`` (so an invalid edit fails here, before any PUT), then
PUT it with ``If-Match`` on the version read, so two operators never overwrite each other.
The pure parts (parsing, spec edits, rendering) live in ``serving.cli_routes_pure``.
Exit status: 0 ok, 1 when the API refuses or cannot be reached, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from serving.cli_routes_pure import (
    EditError,
    abort_canary,
    add_shadow,
    audit_table,
    describe_primaries,
    eval_gate,
    history_table,
    load_spec_file,
    parse_steps,
    parse_weights,
    promote_canary,
    remove_shadow,
    require_a_gate,
    routes_table,
    set_weights,
    shadow_report,
    slo_gates,
    spec_diff,
    start_canary,
    validate_spec,
)

if TYPE_CHECKING:
    import httpx

    from serving.routing.spec import RouteSpec

DEFAULT_URL = "http://127.0.0.1:8000"


class ApiError(Exception):
    """The admin API answered with an error status (``status`` None: it could not be reached)."""

    def __init__(self, status: int | None, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code  # the OpenAI-shape error's code, when the API gave one


class AdminClient:
    """A thin sync client of the gateway's admin API; error answers become :class:`ApiError`."""

    def __init__(self, url: str, token: str | None, *, transport: httpx.BaseTransport | None = None) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0, transport=transport)

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        version: int | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        import httpx

        headers = {"If-Match": f'"{version}"'} if version is not None else {}
        try:
            response = self._http.request(method, path, json=body, headers=headers, params=params)
        except httpx.InvalidURL as exc:
            raise ApiError(None, f"{self.url}{path} is not a URL: {exc}") from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            raise ApiError(None, f"cannot reach the gateway at {self.url}: {exc}") from None
        except httpx.TransportError as exc:
            if method == "GET":
                raise ApiError(None, f"the gateway at {self.url} did not answer: {exc}") from None
            # Sent, but no answer: the change may well be stored (re-running it would add another).
            raise ApiError(
                None,
                f"the gateway at {self.url} took the request but did not answer ({exc}): the change "
                f"may have been stored; check `turnout routes history` before running it again",
            ) from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _error_message(response), _error_code(response))
        return response.json()


def _route_path(name: str, sub_resource: str = "") -> str:
    """A route's admin path: names may hold "/" (``org/model``), kept as is; "?", "#", "%" and the
    like are percent-encoded."""
    return f"/admin/routes/{quote(name, safe='/')}{sub_resource}"


def _error_code(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return str(error["code"]) if isinstance(error, dict) and error.get("code") else None


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or response.reason_phrase)
    if isinstance(body, dict) and "detail" in body:
        return json.dumps(body["detail"])
    return json.dumps(body)


def common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # On the group and on every sub-command, so the options may come before or after the command.
    default: Any = None if defaults else argparse.SUPPRESS
    flag: Any = False if defaults else argparse.SUPPRESS
    parser.add_argument("--url", default=default, help=f"gateway (default: $TURNOUT_URL or {DEFAULT_URL})")
    parser.add_argument("--token", default=default, help="admin token (default: $TURNOUT_ADMIN_TOKEN)")
    parser.add_argument("--json", action="store_true", default=flag, help="print the API's JSON")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``routes`` and its sub-commands to the ``turnout`` parser."""
    routes = commands.add_parser("routes", help="list and change routes on a running gateway (admin API)")
    common_options(routes, defaults=True)
    sub = routes.add_subparsers(dest="routes_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text)
        common_options(parser, defaults=False)
        if name not in ("list", "audit"):
            parser.add_argument("name", help="the route (public model name)")
        return parser

    command("list", "every route: version, split, shadows, fallbacks")
    command("show", "one route's current version as JSON")
    edit = command("set", "replace a route's spec from a YAML or JSON file (creates a missing route)")
    edit.add_argument("--file", required=True, help="spec file (a RouteSpec, or a version with a 'spec')")
    edit.add_argument("--if-match", type=int, help="only if the route is still at this version")
    weights = command("weights", "set the primary targets and their weights")
    weights.add_argument("weights", nargs="+", metavar="VARIANT=WEIGHT")
    shadow = command("shadow", "show the shadow comparison, or add/remove a shadow")
    change = shadow.add_mutually_exclusive_group()
    change.add_argument("--add", metavar="VARIANT")
    change.add_argument("--remove", metavar="VARIANT")
    shadow.add_argument("--rate", type=float, default=0.1, help="sampled share of requests (default 0.1)")
    shadow.add_argument("--timeout", type=float, default=30.0, help="shadow call timeout, s (default 30)")
    canary = command("canary", "start a canary with SLO gates, or abort or promote the running one")
    which = canary.add_mutually_exclusive_group(required=True)
    which.add_argument("--canary", metavar="VARIANT", help="the variant to move traffic to")
    which.add_argument("--abort", action="store_true", help="back to the stable variant alone")
    which.add_argument(
        "--promote", action="store_true", help="skip the remaining steps: the canary variant alone"
    )
    canary.add_argument("--steps", default="5,25,50,100", help="canary percentages (default 5,25,50,100)")
    canary.add_argument("--min-requests", type=int, default=100, help="requests per step (default 100)")
    canary.add_argument("--min-duration", type=float, default=60.0, help="seconds per step (default 60)")
    canary.add_argument("--max-error-rate", type=float, help="gate: error rate, a fraction (0.05 = 5%%)")
    canary.add_argument("--max-p95-ttft-ms", type=float, help="gate: p95 time to first token, ms")
    canary.add_argument("--max-p95-latency-ms", type=float, help="gate: p95 latency, ms")
    canary.add_argument("--max-latency-ratio", type=float, help="gate: p95 latency at most R × stable's")
    evals = "eval gate: "
    canary.add_argument(
        "--eval-dataset",
        default="addition",
        help=evals + "addition, continuation or a .jsonl path (default addition)",
    )
    canary.add_argument("--eval-examples", type=int, default=50, help=evals + "rows used (default 50)")
    canary.add_argument("--eval-min-accuracy", type=float, help=evals + "canary accuracy at least this (0-1)")
    canary.add_argument(
        "--eval-max-drop-pt",
        type=float,
        help=evals + "canary accuracy at most this many points below stable's",
    )
    canary.add_argument("--eval-chat", action="store_true", help=evals + "ask through chat, not completions")
    rollback = command(
        "rollback",
        "make a new version equal to an older one (default: the previous one with no canary in "
        "progress, unless the current version is itself a rollback)",
    )
    rollback.add_argument("--to", type=int, help="the version to return to")
    command("history", "every version of a route, oldest first")
    diff = command("diff", "unified diff of two versions' specs")
    diff.add_argument("v1", type=int)
    diff.add_argument("v2", type=int, nargs="?", help="default: the current version")
    audit = command("audit", "the audit log, newest first: every route change and key created or revoked")
    audit.add_argument("--route", help="only this route's entries")
    audit.add_argument("--limit", type=int, default=50, help="entries shown, 1 to 10000 (default 50)")
    for parser in (edit, weights, shadow, canary, rollback):
        parser.add_argument("--reason", help="why (kept in the route's history)")


def _put(
    client: AdminClient, args: argparse.Namespace, spec: RouteSpec, version: int | None, reason: str
) -> int:
    body = {"spec": spec.model_dump(mode="json"), "reason": args.reason or reason}
    return _report(client.call("PUT", _route_path(args.name), body=body, version=version), args)


def _report(rv: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(rv, indent=2))
        return 0
    spec = validate_spec(rv["spec"])
    shadows = ", ".join(f"{s.variant} {100 * s.sample_rate:g}%" for s in spec.shadows)
    tail = f"; shadows: {shadows}" if shadows else ""
    print(f"{rv['route']}: version {rv['version']} ({rv['action']}): {describe_primaries(spec)}{tail}")
    return 0


def _current(client: AdminClient, name: str) -> tuple[RouteSpec, int]:
    rv = client.call("GET", _route_path(name))
    return validate_spec(rv["spec"]), int(rv["version"])


def _list(client: AdminClient, args: argparse.Namespace) -> int:
    data = client.call("GET", "/admin/routes")
    print(json.dumps(data, indent=2) if args.json else routes_table(data["routes"]))
    return 0


def _show(client: AdminClient, args: argparse.Namespace) -> int:
    print(json.dumps(client.call("GET", _route_path(args.name)), indent=2))
    return 0


def _set(client: AdminClient, args: argparse.Namespace) -> int:
    spec = load_spec_file(Path(args.file))
    version = args.if_match
    if version is None:
        try:
            version = _current(client, args.name)[1]
        except ApiError as exc:
            if exc.status != 404:
                raise
    return _put(client, args, spec, version, f"set from {Path(args.file).name}")


def _weights(client: AdminClient, args: argparse.Namespace) -> int:
    targets = parse_weights(args.weights)
    spec, version = _current(client, args.name)
    return _put(client, args, set_weights(spec, targets), version, "weights " + " ".join(args.weights))


def _shadow(client: AdminClient, args: argparse.Namespace) -> int:
    if args.add is None and args.remove is None:
        data = client.call("GET", _route_path(args.name, "/shadow"))
        print(json.dumps(data, indent=2) if args.json else shadow_report(data))
        return 0
    spec, version = _current(client, args.name)
    if args.add is not None:
        edited = add_shadow(spec, args.add, args.rate, args.timeout)
        return _put(client, args, edited, version, f"add shadow {args.add}@{args.rate:g}")
    return _put(client, args, remove_shadow(spec, args.remove), version, f"remove shadow {args.remove}")


def _canary(client: AdminClient, args: argparse.Namespace) -> int:
    if args.abort or args.promote:
        spec, version = _current(client, args.name)
        if args.abort:
            edited, canary = abort_canary(spec)
            return _put(client, args, edited, version, f"abort canary {canary}")
        edited, canary = promote_canary(spec)
        return _put(client, args, edited, version, f"promote canary {canary} (remaining steps skipped)")
    steps = parse_steps(args.steps)
    gates = slo_gates(
        max_error_rate=args.max_error_rate,
        max_p95_ttft_ms=args.max_p95_ttft_ms,
        max_p95_latency_ms=args.max_p95_latency_ms,
        max_latency_ratio=args.max_latency_ratio,
    )
    evals = eval_gate(
        dataset=args.eval_dataset,
        examples=args.eval_examples,
        min_accuracy=args.eval_min_accuracy,
        max_drop_pt=args.eval_max_drop_pt,
        chat=args.eval_chat,
    )
    require_a_gate(gates, evals)  # before asking the gateway anything
    spec, version = _current(client, args.name)
    edited = start_canary(
        spec, args.canary, steps, args.min_requests, args.min_duration, gates, evals, route=args.name
    )
    plan = edited.canary
    assert plan is not None
    text = ",".join(f"{step:g}" for step in plan.steps)
    return _put(
        client, args, edited, version, f"start canary {plan.canary} (stable {plan.stable}), steps {text}"
    )


def _rollback(client: AdminClient, args: argparse.Namespace) -> int:
    # If-Match on the version read, as every edit: a change landing in between is a 409, not
    # silently the thing rolled back.
    # Only the version: an emergency rollback must not fail on this CLI's view of the spec.
    version = int(client.call("GET", _route_path(args.name))["version"])
    body = {"to_version": args.to, "reason": args.reason}
    path = _route_path(args.name, "/rollback")
    return _report(client.call("POST", path, body=body, version=version), args)


def _history(client: AdminClient, args: argparse.Namespace) -> int:
    data = client.call("GET", _route_path(args.name, "/history"))
    print(json.dumps(data, indent=2) if args.json else history_table(data["versions"]))
    return 0


def _diff(client: AdminClient, args: argparse.Namespace) -> int:
    versions = client.call("GET", _route_path(args.name, "/history"))["versions"]
    by_number = {int(rv["version"]): rv["spec"] for rv in versions}
    v2 = args.v2 if args.v2 is not None else max(by_number, default=0)
    for wanted in (args.v1, v2):
        if wanted not in by_number:
            raise ApiError(404, f"route '{args.name}' has no version {wanted}")
    label = f"{args.name}@v"
    text = spec_diff(by_number[args.v1], by_number[v2], f"{label}{args.v1}", f"{label}{v2}")
    print(text or f"versions {args.v1} and {v2} have the same spec", end="" if text else "\n")
    return 0


def _audit(client: AdminClient, args: argparse.Namespace) -> int:
    params = {"limit": str(args.limit)}
    if args.route:
        params["route"] = args.route
    data = client.call("GET", "/admin/audit", params=params)
    if args.json:
        print(json.dumps(data, indent=2))
    elif not data["entries"]:
        print(f"no audit entries for route '{args.route}'" if args.route else "no audit entries")
    else:
        print(audit_table(data["entries"]))
    return 0


_READS = {"list": _list, "show": _show, "history": _history, "diff": _diff, "audit": _audit}
_EDITS = {"set": _set, "weights": _weights, "shadow": _shadow, "canary": _canary, "rollback": _rollback}
_COMMANDS = {**_READS, **_EDITS}


def run(args: argparse.Namespace, *, transport: httpx.BaseTransport | None = None) -> int:
    """Run one ``turnout routes`` command (``transport`` lets tests answer without a server)."""
    client = open_client(args, transport)
    if client is None:
        return 2
    try:
        return _COMMANDS[args.routes_command](client, args)
    except EditError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        say_api_error(exc)
        if exc.status == 409 and exc.code == "version_conflict":  # not "already_rolled_back"
            print(
                "  the route changed since it was read: re-run the command to apply it to the "
                f"current version (see `turnout routes history {args.name}`)",
                file=sys.stderr,
            )
        return 1
    finally:
        client.close()


def open_client(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> AdminClient | None:
    """The admin client ``--url`` and ``--token`` name (else $TURNOUT_URL, $TURNOUT_ADMIN_TOKEN);
    None, said on stderr, when the URL is not one."""
    import httpx

    url = args.url or os.environ.get("TURNOUT_URL") or DEFAULT_URL
    token = args.token or os.environ.get("TURNOUT_ADMIN_TOKEN") or None
    try:
        return AdminClient(url, token, transport=transport)
    except httpx.InvalidURL as exc:
        print(f"turnout: --url {url!r} is not a URL ({exc}), e.g. {DEFAULT_URL}", file=sys.stderr)
        return None


def say_api_error(exc: ApiError, token_hint: str = "pass --token or set $TURNOUT_ADMIN_TOKEN") -> None:
    """The API's refusal (or silence) on stderr, with how to give a token after a 401."""
    prefix = "turnout:" if exc.status is None else f"turnout: {exc.status}"
    print(f"{prefix} {exc.message}", file=sys.stderr)
    if exc.status == 401:
        print(f"  {token_hint}", file=sys.stderr)
