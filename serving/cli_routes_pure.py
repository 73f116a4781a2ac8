"""The pure half of ``turnout routes``: parse arguments, edit route specs, render tables and diffs.

Off the request path: ``serving.cli_routes`` fetches a route from the admin API, edits its
spec here and PUTs the result. Every edit rebuilds the spec through the pydantic models of
``serving.routing.spec``, so an invalid change raises :class:`EditError` with a readable
reason before anything is sent. No I/O but reading a spec file.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from serving.routing.canary import Verdict, apply
from serving.routing.spec import (
    CanaryPlan,
    EvalGate,
    RouteSpec,
    ShadowTarget,
    SloGate,
    WeightedTarget,
    describe_split,
    live_targets,
)
from serving.routing.spec_errors import field_message


class EditError(ValueError):
    """A local mistake: a bad argument or an edit that would make an invalid spec."""


def _reason(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = field_message(error)
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def validate_spec(data: object) -> RouteSpec:
    try:
        return RouteSpec.model_validate(data)
    except ValidationError as exc:
        raise EditError(f"invalid route spec: {_reason(exc)}") from None


def _rebuild(spec: RouteSpec, **changes: Any) -> RouteSpec:
    data = spec.model_dump()
    data.update(changes)
    return validate_spec(data)


def load_spec_file(path: Path) -> RouteSpec:
    """A spec from YAML or JSON: a bare RouteSpec, or a route version (``show`` output) with a ``spec``."""
    import yaml

    from deploy import strict_yaml

    try:
        data = strict_yaml.load(path.read_text(), str(path))
    except OSError as exc:
        raise EditError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise EditError(f"{path}: not UTF-8 text (byte {exc.start}): a route spec is YAML or JSON") from None
    except yaml.YAMLError as exc:
        raise EditError(f"{path}: not valid YAML or JSON: {exc}") from None
    if isinstance(data, dict) and "spec" in data and "targets" not in data:
        data = data["spec"]
    if not isinstance(data, dict):
        raise EditError(f"{path}: expected a mapping (a route spec)")
    try:
        return RouteSpec.model_validate(data)
    except ValidationError as exc:
        raise EditError(f"{path}: invalid route spec: {_reason(exc)}") from None


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EditError(f"{what}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise EditError(f"{what}: must be a finite number, got {text!r}")
    return value


def parse_weights(items: Sequence[str]) -> list[WeightedTarget]:
    """``["a=70", "b=30"]`` → weighted targets, in the order given."""
    if not items:
        raise EditError("give at least one VARIANT=WEIGHT")
    targets = []
    for item in items:
        variant, sep, weight = item.partition("=")
        if not sep or not variant.strip() or not weight.strip():
            raise EditError(f"expected VARIANT=WEIGHT, got {item!r}")
        try:
            targets.append(WeightedTarget(variant=variant.strip(), weight=_number(weight, item)))
        except ValidationError as exc:
            raise EditError(f"{item}: {_reason(exc)}") from None
    return targets


def parse_steps(text: str) -> list[float]:
    """``"5,25,50,100"`` → ``[5.0, 25.0, 50.0, 100.0]`` (checked when the plan is built)."""
    steps = [_number(part.strip(), "--steps") for part in text.split(",") if part.strip()]
    if not steps:
        raise EditError("--steps: give at least one percentage, e.g. 5,25,50,100")
    return steps


def set_weights(spec: RouteSpec, targets: list[WeightedTarget]) -> RouteSpec:
    if spec.canary is not None:
        raise EditError(
            f"a canary of '{spec.canary.canary}' is running and sets the split; "
            "abort it first (canary --abort)"
        )
    return _rebuild(spec, targets=targets)


def add_shadow(spec: RouteSpec, variant: str, rate: float, timeout_s: float) -> RouteSpec:
    """Add a shadow, or change the rate and timeout of an existing one in place."""
    try:
        shadow = ShadowTarget(variant=variant, sample_rate=rate, timeout_s=timeout_s)
    except ValidationError as exc:
        raise EditError(f"shadow {variant}: {_reason(exc)}") from None
    shadows = [shadow if s.variant == variant else s for s in spec.shadows]
    if all(s.variant != variant for s in spec.shadows):
        shadows.append(shadow)
    return _rebuild(spec, shadows=shadows)


def remove_shadow(spec: RouteSpec, variant: str) -> RouteSpec:
    kept = [s for s in spec.shadows if s.variant != variant]
    if len(kept) == len(spec.shadows):
        names = ", ".join(s.variant for s in spec.shadows) or "none"
        raise EditError(f"'{variant}' is not a shadow of this route (shadows: {names})")
    return _rebuild(spec, shadows=kept)


def slo_gates(
    *,
    max_error_rate: float | None = None,
    max_p95_ttft_ms: float | None = None,
    max_p95_latency_ms: float | None = None,
    max_latency_ratio: float | None = None,
) -> list[SloGate]:
    """The canary's gates from the CLI flags; the latency bound and ratio share one gate."""
    wanted: list[tuple[str, float | None, float | None]] = [
        ("error_rate", max_error_rate, None),
        ("p95_ttft_ms", max_p95_ttft_ms, None),
        ("p95_latency_ms", max_p95_latency_ms, max_latency_ratio),
    ]
    gates = []
    for metric, bound, ratio in wanted:
        if bound is None and ratio is None:
            continue
        try:
            gates.append(
                SloGate.model_validate({"metric": metric, "max": bound, "max_ratio_to_stable": ratio})
            )
        except ValidationError as exc:
            raise EditError(f"gate on {metric}: {_reason(exc)}") from None
    return gates


def eval_gate(
    *,
    dataset: str,
    examples: int,
    min_accuracy: float | None = None,
    max_drop_pt: float | None = None,
    chat: bool = False,
) -> EvalGate | None:
    """The canary's eval gate from the CLI flags; None when neither bound is given."""
    if min_accuracy is None and max_drop_pt is None:
        return None
    endpoint = "chat" if chat else "completion"
    data = {"dataset": dataset, "examples": examples, "min_accuracy": min_accuracy,
            "max_drop_pt": max_drop_pt, "endpoint": endpoint}  # fmt: skip
    try:
        return EvalGate.model_validate(data)
    except ValidationError as exc:
        raise EditError(f"eval gate: {_reason(exc)}") from None


def stable_target(spec: RouteSpec) -> str:
    """The variant a canary starts from: the single target, else the heaviest (first on a tie)."""
    return max(spec.targets, key=lambda t: t.weight).variant


def require_a_gate(gates: list[SloGate], evals: EvalGate | None) -> None:
    if not gates and evals is None:
        raise EditError(
            "a canary needs at least one gate: --max-error-rate, --max-p95-ttft-ms, "
            "--max-p95-latency-ms, --max-latency-ratio, --eval-min-accuracy or --eval-max-drop-pt"
        )


def start_canary(
    spec: RouteSpec,
    canary: str,
    steps: list[float],
    min_requests: int,
    min_duration_s: float,
    gates: list[SloGate],
    evals: EvalGate | None = None,
    route: str = "NAME",
) -> RouteSpec:
    if spec.canary is not None:
        raise EditError(f"a canary of '{spec.canary.canary}' is already running; abort it first (--abort)")
    require_a_gate(gates, evals)
    split = live_targets(spec)
    if len(split) > 1:  # the canary's stable/canary split would silently replace this one
        raise EditError(
            f"the route splits its traffic ({describe_split(split)}); a canary moves traffic from one "
            f"stable variant: put the route on one first (`turnout routes weights {route} "
            f"{stable_target(spec)}=1`)"
        )
    if canary in {s.variant for s in spec.shadows}:  # the spec refuses it too, less helpfully
        raise EditError(
            f"'{canary}' is a shadow of this route; remove the shadow first "
            f"(`turnout routes shadow {route} --remove {canary}`)"
        )
    data = {
        "stable": stable_target(spec),
        "canary": canary,
        "steps": steps,
        "min_requests": min_requests,
        "min_duration_s": min_duration_s,
        "gates": gates,
        "eval_gate": evals,
    }
    try:
        plan = CanaryPlan.model_validate(data)
    except ValidationError as exc:
        raise EditError(f"invalid canary plan: {_reason(exc)}") from None
    return _rebuild(spec, canary=plan)


def abort_canary(spec: RouteSpec) -> tuple[RouteSpec, str]:
    """The spec back on the stable variant alone, and the aborted canary's name."""
    if spec.canary is None:
        raise EditError("no canary is running on this route")
    stable = spec.canary.stable
    return _rebuild(spec, targets=[WeightedTarget(variant=stable)], canary=None), spec.canary.canary


def promote_canary(spec: RouteSpec) -> tuple[RouteSpec, str]:
    """The running canary promoted at once, its remaining steps skipped (Argo Rollouts'
    ``promote --full``): the canary variant alone, as the judge leaves it after the last step."""
    if spec.canary is None:
        raise EditError("no canary is running on this route")
    plan = spec.canary
    at_last_step = spec.model_copy(update={"canary": plan.model_copy(update={"step": len(plan.steps) - 1})})
    promoted = apply(at_last_step, Verdict("promote", "promoted by hand"))
    assert promoted is not None  # a promotion is never a hold
    return promoted[0], plan.canary


def _percent(value: float) -> str:
    return f"{value:.0f}%" if abs(value - round(value)) < 0.05 else f"{value:.1f}%"


def describe_primaries(spec: RouteSpec) -> str:
    """``"a 70%, b 30%"``; with a canary running, its split and ``canary step i/n``."""
    primaries = spec.primaries()
    total = sum(t.weight for t in primaries)
    if math.isfinite(total):
        text = ", ".join(f"{t.variant} {_percent(100.0 * t.weight / total)}" for t in primaries)
    else:  # stored before weights had to sum to a finite number: show them as written
        text = ", ".join(f"{t.variant} weight {t.weight:g}" for t in primaries)
    if spec.canary is not None:
        text += f" (canary step {spec.canary.step + 1}/{len(spec.canary.steps)})"
    return text


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain left-aligned text table with a dashed rule under the header."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def routes_table(versions: Sequence[dict[str, Any]]) -> str:
    rows = []
    for rv in versions:
        spec = RouteSpec.model_validate(rv["spec"])
        shadows = ", ".join(f"{s.variant}@{s.sample_rate:g}" for s in spec.shadows) or "-"
        fallbacks = ", ".join(spec.fallbacks) or "-"
        rows.append([str(rv["route"]), str(rv["version"]), describe_primaries(spec), shadows, fallbacks])
    return render_table(["route", "version", "primaries", "shadows", "fallbacks"], rows)


def format_time(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def history_table(versions: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            str(rv["version"]),
            str(rv["action"]),
            str(rv["author"]),
            format_time(rv["created_at"]),
            rv["reason"] or "",
        ]
        for rv in versions
    ]
    return render_table(["version", "action", "author", "time", "reason"], rows)


def audit_table(entries: Sequence[dict[str, Any]]) -> str:
    """The audit log as ``turnout routes audit`` prints it (a key's entries have no route)."""
    rows = [
        [
            format_time(entry["at"]),
            str(entry["actor"]),
            str(entry["action"]),
            str(entry["route"]) if entry.get("route") is not None else "-",
            str(entry["version"]) if entry.get("version") is not None else "-",
            _shorten(" ".join(str(entry.get("detail") or "").split()), 80),
        ]
        for entry in entries
    ]
    return render_table(["time", "actor", "action", "route", "version", "detail"], rows)


def spec_diff(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> str:
    """Unified diff of two specs written as sorted, indented JSON ("" when equal)."""

    def lines(spec: dict[str, Any]) -> list[str]:
        return [line + "\n" for line in json.dumps(spec, sort_keys=True, indent=2).splitlines()]

    return "".join(difflib.unified_diff(lines(old), lines(new), fromfile=old_label, tofile=new_label))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def shadow_report(data: dict[str, Any], *, differences_shown: int = 5) -> str:
    """The admin API's shadow comparison: one row per shadow variant, then recent differences."""
    shadows: dict[str, dict[str, Any]] = data.get("shadows") or {}
    route = data.get("route", "")
    if not shadows:
        return f"{route}: no shadow results yet"
    columns: list[str] = []
    for summary in shadows.values():
        columns += [key for key in summary if key not in columns]
    rows = [[variant, *(_cell(summary.get(c)) for c in columns)] for variant, summary in shadows.items()]
    out = [render_table(["variant", *columns], rows)]
    replicas: dict[str, dict[str, Any]] = data.get("gateway_replicas") or {}
    if replicas:  # a Ray Serve application's: the figures are every gateway replica's together
        each = ", ".join(f"{replica} sent {figures.get('sent')}" for replica, figures in replicas.items())
        out.append(f"\nover {len(replicas)} gateway replicas: {each}")
    differences = data.get("recent_differences") or []
    out.append(f"\nrecent differences: {len(differences)} (newest first)")
    for difference in differences[:differences_shown]:
        out.append(_difference_line(difference))
    return "\n".join(out)


def _clip(text: object, width: int = 60) -> str:
    shown = json.dumps(str(text), ensure_ascii=False)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _difference_line(difference: dict[str, Any]) -> str:
    primary = difference.get("primary") or {}
    shadow = difference.get("shadow_answer") or {}
    replica = difference.get("gateway_replica")
    return (
        f"  {difference.get('shadow')}: similarity {_cell(difference.get('similarity'))}, "
        f"latency {_cell(difference.get('latency_delta_ms'))} ms vs primary, "
        f"status {primary.get('status')}/{shadow.get('status')}"
        f"{f', gateway replica {replica}' if replica else ''}\n"
        f"    primary {_clip(primary.get('text', ''))}\n"
        f"    shadow  {_clip(shadow.get('text', ''))}"
    )
