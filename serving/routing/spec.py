"""The route spec: what serves one public model name, as an immutable, validated value.

Stored as JSON in every route version (``serving.store``), read by the pure decision in
``serving.routing.policy``, edited through the admin API and the ``turnout routes`` CLI.
Shape rules (weights, duplicates, canary steps) are checked by the models themselves;
rules that need the set of configured variants are checked by :func:`problems`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

Percent = Annotated[float, Field(gt=0, le=100)]


# Every number in a route is finite: an infinite weight or gate would be written to the store
# and break JSON (and ``nan`` compares false to every bound).
_SPEC_MODEL = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _SpecModel(BaseModel):
    """A part of a route spec. A number is never true or false: the admin API took ``true`` as a
    weight of 1 and would take it as a shadow's sample_rate (mirror everything). Numbers written
    as strings stay accepted: PyYAML reads ``1e-3`` as one."""

    model_config = _SPEC_MODEL

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name is None:
            return value
        kinds = _types_in(cls.model_fields[info.field_name].annotation)
        if bool in kinds or not kinds & {int, float}:
            return value
        items = value if isinstance(value, list) else [value]
        if any(isinstance(item, bool) for item in items):
            raise ValueError("must be a number, not true or false")
        return value


def _types_in(annotation: object) -> set[object]:
    """The plain types an annotation admits, through Annotated, unions and lists."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _types_in(get_args(annotation)[0])
    if origin in (Union, UnionType, list, tuple):
        return set().union(*(_types_in(arg) for arg in get_args(annotation) if arg is not Ellipsis))
    return {annotation}


class WeightedTarget(_SpecModel):
    variant: str
    # 0 keeps a variant in the route (and its keys' assignment stable) while it takes no traffic.
    weight: Annotated[float, Field(ge=0)] = 1.0


class ShadowTarget(_SpecModel):
    """A variant that gets a sampled copy of the route's traffic; its answers are only compared."""

    variant: str
    sample_rate: Annotated[float, Field(ge=0, le=1)] = 1.0
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0


GateMetric = Literal["error_rate", "p95_ttft_ms", "p95_latency_ms"]


class SloGate(_SpecModel):
    """One service-level bound the canary must hold: absolute, relative to stable, or both."""

    metric: GateMetric
    # Absolute bound: error_rate as a fraction (0.05 = 5%), the others in milliseconds.
    max: Annotated[float, Field(ge=0)] | None = None
    # Relative bound: the canary's value may be at most this many times the stable variant's.
    max_ratio_to_stable: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _has_a_bound(self) -> SloGate:
        if self.max is None and self.max_ratio_to_stable is None:
            raise ValueError(f"gate on {self.metric} needs max or max_ratio_to_stable")
        if self.metric == "error_rate" and self.max is not None and self.max > 1:
            # 2 meant as 2% would be a gate that never breaks: a failing canary gets promoted.
            raise ValueError(
                f"error_rate max is a fraction of requests (0.02 = 2%), at most 1; got {self.max:g}"
            )
        return self


# The generation datasets ``evals/`` ships (``evals.datasets.shipped``); any other ``dataset``
# is a path to a JSONL file of the same shape (``{"id", "prompt", "answer"}`` per line).
SHIPPED_EVAL_DATASETS = ("addition", "continuation")


class EvalGate(_SpecModel):
    """Accuracy the canary must show on an eval set before it is promoted.

    The gateway runs ``examples`` rows of ``dataset`` greedily through the canary's backend
    (and, for ``max_drop_pt``, the stable variant's) once per canary plan, and scores each
    answer (``scoring``) against the row's ``answer``. The canary is rolled back when its
    accuracy is below ``min_accuracy`` (a fraction) or more than ``max_drop_pt`` percentage
    points below the stable variant's on the same rows; a request that fails counts as wrong.
    """

    dataset: Annotated[str, Field(min_length=1)] = "addition"
    examples: Annotated[int, Field(ge=1, le=2000)] = 50
    scoring: Literal["exact", "normalized"] = "exact"
    endpoint: Literal["completion", "chat"] = "completion"
    # 32: the longest shipped reference (continuation cont-0048) is 19 tokens; 16 cut it short
    max_tokens: Annotated[int, Field(ge=1, le=1024)] = 32
    min_accuracy: Annotated[float, Field(ge=0, le=1)] | None = None
    max_drop_pt: Annotated[float, Field(ge=0, le=100)] | None = None

    @model_validator(mode="after")
    def _usable(self) -> EvalGate:
        if self.min_accuracy is None and self.max_drop_pt is None:
            raise ValueError("eval_gate needs min_accuracy or max_drop_pt")
        if self.dataset not in SHIPPED_EVAL_DATASETS and not self.dataset.endswith(".jsonl"):
            shipped = ", ".join(SHIPPED_EVAL_DATASETS)
            raise ValueError(f"eval_gate.dataset: one of {shipped}, or a path to a .jsonl file")
        return self

    @property
    def against_stable(self) -> bool:
        return self.max_drop_pt is not None


class CanaryPlan(_SpecModel):
    """Move traffic from ``stable`` to ``canary`` step by step while every gate holds.

    ``step`` is the index into ``steps`` in force; it is state, advanced by the canary
    controller writing a new route version, so every promotion is versioned and audited.
    """

    stable: str
    canary: str
    steps: Annotated[list[Percent], Field(min_length=1)] = [5.0, 25.0, 50.0, 100.0]
    min_requests: Annotated[int, Field(ge=1)] = 100
    min_duration_s: Annotated[float, Field(ge=0)] = 60.0
    gates: list[SloGate] = []
    eval_gate: EvalGate | None = None
    step: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _well_formed(self) -> CanaryPlan:
        if self.stable == self.canary:
            raise ValueError("canary.canary must differ from canary.stable")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:], strict=False)):
            raise ValueError(f"canary.steps must increase strictly: {self.steps}")
        if not self.gates and self.eval_gate is None:
            raise ValueError("a canary needs at least one gate (gates or eval_gate)")
        if self.step >= len(self.steps):
            raise ValueError(f"canary.step {self.step} is past the last step (there are {len(self.steps)})")
        return self

    @property
    def percent(self) -> float:
        return self.steps[self.step]


StickySource = Literal["auto", "header", "user", "none"]


class RouteSpec(_SpecModel):
    """Weighted primaries, stickiness, shadows, ordered fallbacks, retries and an optional canary."""

    targets: Annotated[list[WeightedTarget], Field(min_length=1)]
    # Where the stickiness key comes from: "auto" = the x-turnout-key header, else the OpenAI
    # ``user`` field; "none" = a fresh random draw per request.
    sticky: StickySource = "auto"
    shadows: list[ShadowTarget] = []
    fallbacks: list[str] = []
    # Extra attempts on the chosen variant before moving down the fallbacks (before the first byte).
    retries: Annotated[int, Field(ge=0, le=5)] = 0
    canary: CanaryPlan | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RouteSpec:
        names = [t.variant for t in self.targets]
        if len(set(names)) != len(names):
            raise ValueError(f"a variant appears twice in targets: {names}")
        if sum(t.weight for t in self.targets) <= 0:
            raise ValueError("target weights must sum to a positive number")
        shadow_names = [s.variant for s in self.shadows]
        if len(set(shadow_names)) != len(shadow_names):
            raise ValueError(f"a variant appears twice in shadows: {shadow_names}")
        for shadow in shadow_names:
            if shadow in names:
                raise ValueError(f"shadow '{shadow}' is also a primary target; a shadow must differ")
        if len(set(self.fallbacks)) != len(self.fallbacks):
            raise ValueError(f"a variant appears twice in fallbacks: {self.fallbacks}")
        if self.canary is not None:
            if self.canary.stable not in names:
                raise ValueError(f"canary.stable '{self.canary.stable}' must be one of the targets {names}")
            if self.canary.canary in shadow_names:
                raise ValueError(f"canary '{self.canary.canary}' is also a shadow")
        return self

    def primaries(self) -> list[WeightedTarget]:
        """The weighted targets in force: the canary plan's split while one runs."""
        if self.canary is None:
            return self.targets
        share = self.canary.percent
        return [
            WeightedTarget(variant=self.canary.stable, weight=100.0 - share),
            WeightedTarget(variant=self.canary.canary, weight=share),
        ]

    def renamed(self, aliases: Mapping[str, str]) -> RouteSpec:
        """This spec with each variant reference passed through ``aliases`` (spec name → spec id).

        Names not in ``aliases`` stay as written; the result is validated again (a name and an
        id of the same variant in one list become a duplicate).
        """
        if not aliases or not self.variants() & set(aliases):
            return self
        data = self.model_dump()
        for target in (*data["targets"], *data["shadows"]):
            target["variant"] = aliases.get(target["variant"], target["variant"])
        data["fallbacks"] = [aliases.get(name, name) for name in data["fallbacks"]]
        if data["canary"] is not None:
            for role in ("stable", "canary"):
                data["canary"][role] = aliases.get(data["canary"][role], data["canary"][role])
        return RouteSpec.model_validate(data)

    def variants(self) -> set[str]:
        """Every variant the route may send traffic to (primaries, shadows, fallbacks, canary)."""
        found = {t.variant for t in self.targets} | {s.variant for s in self.shadows} | set(self.fallbacks)
        if self.canary is not None:
            found |= {self.canary.stable, self.canary.canary}
        return found


MAX_ROUTE_NAME = 256
# The admin API's sub-resources of a route (``/admin/routes/NAME/history``…): a route named to end
# like one could not be told from it, as names may hold "/" (``meta-llama/Llama-3.1-8B-Instruct``).
ROUTE_SUB_RESOURCES = ("history", "rollback", "shadow")


def route_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a route (a public model name), or None. Any text a client can send
    as ``model`` and an operator can type: not empty, at most 256 characters, no control
    characters, no spaces at either end, not ending in an admin sub-resource."""
    if not name or len(name) > MAX_ROUTE_NAME:
        return f"a route name has 1 to {MAX_ROUTE_NAME} characters, not {len(name)}"
    if any(not c.isprintable() for c in name) or name != name.strip():
        return f"route name {name!r} holds control characters or spaces at an end"
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return f"route name {name!r} starts or ends with '/' or has an empty part"
    last = name.rsplit("/", 1)[-1]
    if "/" in name and last in ROUTE_SUB_RESOURCES:
        return f"route name {name!r} ends in '/{last}', which the admin API reads as the route's {last}"
    return None


def live_targets(spec: RouteSpec) -> list[WeightedTarget]:
    """The targets that get traffic (weight above 0)."""
    return [t for t in spec.targets if t.weight > 0]


def describe_split(targets: list[WeightedTarget]) -> str:
    return ", ".join(f"{t.variant} {t.weight:g}" for t in targets)


def write_problems(
    spec: RouteSpec,
    known_variants: set[str] | frozenset[str],
    tasks: Mapping[str, str | None] | None = None,
) -> list[str]:
    """What is wrong with ``spec`` as a new version (empty when it may be written): what
    :func:`problems` finds, and rules that came after versions breaking them were stored.
    ``tasks``: each variant's one task where it has one (an upstream's ``task``), so a route
    does not split, fall back or mirror between an embedding model and a generating one.

    Checked where a spec is written (a config file, the admin API, a rollback's target); stored
    versions are read and served with :func:`problems` alone, so a store an older release wrote
    opens and serves as it did."""
    found = problems(spec, known_variants)
    found += task_problems(spec, tasks or {})
    if not math.isfinite(sum(t.weight for t in spec.targets)):  # each is finite; every draw would land last
        found.append("targets: the weights must sum to a finite number (they are relative: use small ones)")
    if spec.canary is not None:
        # The canary's own split replaces the targets': any other live target would lose its
        # traffic, and a stable one at weight 0 would take over the route's.
        live = live_targets(spec)
        if len(live) > 1:
            found.append(
                f"canary: a canary moves traffic from one stable variant, but the targets split it "
                f"({describe_split(live)}): give the route one target"
            )
        elif live[0].variant != spec.canary.stable:
            found.append(
                f"canary.stable: '{spec.canary.stable}' takes no traffic (weight 0); the route's "
                f"traffic goes to '{live[0].variant}', which must be the canary's stable variant"
            )
    return found


def problems(spec: RouteSpec, known_variants: set[str] | frozenset[str]) -> list[str]:
    """What keeps ``spec`` from serving here (empty when it can serve): variants or an eval
    dataset this gateway lacks. Every stored version in force is checked with this."""
    found: list[str] = []
    known = ", ".join(sorted(known_variants))
    for index, target in enumerate(spec.targets):
        if target.variant not in known_variants:
            found.append(f"targets.{index}.variant: unknown variant '{target.variant}' (known: {known})")
    for index, shadow in enumerate(spec.shadows):
        if shadow.variant not in known_variants:
            found.append(f"shadows.{index}.variant: unknown variant '{shadow.variant}' (known: {known})")
    for index, fallback in enumerate(spec.fallbacks):
        if fallback not in known_variants:
            found.append(f"fallbacks.{index}: unknown variant '{fallback}' (known: {known})")
    if spec.canary is not None and spec.canary.canary not in known_variants:
        found.append(f"canary.canary: unknown variant '{spec.canary.canary}' (known: {known})")
    gate = spec.canary.eval_gate if spec.canary is not None else None
    if gate is not None and gate.dataset not in SHIPPED_EVAL_DATASETS and not Path(gate.dataset).is_file():
        found.append(f"canary.eval_gate.dataset: no such file '{gate.dataset}' on this gateway")
    return found


def task_problems(spec: RouteSpec, tasks: Mapping[str, str | None]) -> list[str]:
    """A route whose variants serve different tasks (``task: embed`` beside ``task: generate``):
    half its requests, or every fallback and shadow copy, would be refused with a 400."""
    serving: dict[str, list[str]] = {}
    for variant in sorted(spec.variants()):
        task = tasks.get(variant)
        if task is not None:
            serving.setdefault(task, []).append(variant)
    if len(serving) < 2:
        return []
    said = " and ".join(f"{', '.join(names)} (task: {task})" for task, names in sorted(serving.items()))
    return [
        f"variants: {said} are on one route; its targets, fallbacks, shadows and canary must serve one task"
    ]
