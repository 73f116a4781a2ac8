"""Gateway configuration: ``gateway.yaml`` → a validated :class:`GatewayConfig`.

Read once by ``serving.cli`` before the app starts; an invalid file fails here with the
file, the field path and the reason, never later while serving. With no file, the
default config serves the shipped model in its three precisions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from backends.settings import EmbeddedSettings, OpenAIHttpSettings, VariantSettings
from deploy import strict_yaml
from deploy.field_errors import plain_reason
from serving.cli_types import LogLevel
from serving.config_terms import CONFIG_TERMS
from serving.errors import ConfigError
from serving.routing.spec import RouteSpec, WeightedTarget, route_name_problem, write_problems
from serving.spec_variants import SpecVariant, spec_aliases

DEFAULT_MODEL = "turnout-tiny"


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1_048_576
    # Per connection (serving/http_protocol.py): the request line and headers together (past
    # it, 431 and close); the time to send them (408), the body (closed), and how long a client
    # may leave an answer unread (dropped).
    max_header_bytes: Annotated[int, Field(ge=1024)] = 65_536
    header_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    body_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    send_stall_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    log_level: LogLevel = "info"
    # Origins whose browser pages may call the API (CORS; "*" = any). None by default: vLLM and
    # LiteLLM allow every origin out of the box, a gateway holding API keys waits to be asked.
    cors_allow_origins: tuple[str, ...] = ()


def default_store_url() -> str:
    """``$TURNOUT_STORE_URL``, else a SQLite file in the user's state directory."""
    configured = os.environ.get("TURNOUT_STORE_URL")
    if configured:
        return configured
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return f"sqlite:///{state / 'turnout' / 'turnout.db'}"


class StoreSettings(BaseModel):
    """Where route versions, the audit log and keys live (any SQLAlchemy URL)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(default_factory=default_store_url, validate_default=True)
    # How often each gateway process looks for changes written by others.
    poll_interval_s: Annotated[float, Field(gt=0, le=10)] = 0.25

    @field_validator("url")
    @classmethod
    def _a_database_url(cls, url: str) -> str:
        """A config error at start, not a traceback when the store opens ($TURNOUT_STORE_URL too)."""
        try:
            make_url(url)
        except ArgumentError:
            raise ValueError(
                f"{url!r} is not a database URL (e.g. sqlite:////var/lib/turnout/turnout.db or "
                "postgresql+psycopg://user@host/db)"
            ) from None
        return url


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Serve clients without a known API key (unknown keys count as anonymous, except ones shaped
    # like Turnout's own: serving.auth.looks_issued). Off unless the
    # config says so; the built-in default config (``turnout serve`` with no file) says so.
    # Strict: a security switch takes true or false, not "yes", 1 or "on".
    anonymous_clients: Annotated[bool, Field(strict=True)] = False
    # An environment variable whose value, when set, is accepted as an admin token.
    admin_token_env: str = "TURNOUT_ADMIN_TOKEN"


class ShadowSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Shadow calls running at once; more are dropped (and counted), never queued behind clients.
    max_in_flight: Annotated[int, Field(ge=1)] = 32
    # Recent differing primary/shadow pairs kept per route for the admin API.
    recent_differences: Annotated[int, Field(ge=0)] = 50


class ResponsesSettings(BaseModel):
    """``/v1/responses`` answers kept in the store, as OpenAI keeps them (``store`` defaults to
    true): ``GET /v1/responses/{id}`` returns one and ``previous_response_id`` continues it; and
    the conversations of ``/v1/conversations``, which a response's ``conversation`` continues."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # false: nothing is kept, every answer says store: false (vLLM's default), and
    # previous_response_id, a response's conversation and /v1/conversations are 400s.
    store: Annotated[bool, Field(strict=True)] = True
    retention_s: Annotated[float, Field(gt=0)] = 86400.0  # then it is gone (OpenAI keeps 30 days)
    # A conversation (/v1/conversations) is gone this long after its last change (a response in
    # it, items added or deleted, its metadata); OpenAI keeps them without a limit.
    conversation_retention_s: Annotated[float, Field(gt=0)] = 30 * 86400.0
    # Background responses (background: true) each gateway runs at once; the rest wait, queued.
    background_max_running: Annotated[int, Field(ge=1)] = 32
    # A background response whose gateway has not beaten for it this long (killed, or cut off
    # from the store) is failed (gateway_gone) when it is next read.
    background_orphan_s: Annotated[float, Field(gt=0)] = 15.0


class BatchSettings(BaseModel):
    """OpenAI's Batch API: ``/v1/files`` keeps a batch's input file, ``/v1/batches`` runs each of
    its requests through this gateway as the key that made it (``serving.batch_runner``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_file_bytes: Annotated[int, Field(ge=1)] = 100 * 1024 * 1024  # an upload's size (OpenAI: 200 MB)
    max_requests: Annotated[int, Field(ge=1)] = 50_000  # requests in one batch, as OpenAI's
    # Uploaded files and a batch's output and error files are gone this long after they were made.
    file_retention_s: Annotated[float, Field(gt=0)] = 30 * 86400.0
    max_running: Annotated[int, Field(ge=1)] = 2  # batches each gateway runs at once
    # Requests each running batch has in flight at once: what a batch takes from live traffic.
    concurrency: Annotated[int, Field(ge=1)] = 8
    # A batch whose gateway has not beaten for it this long (killed, cut off) is taken over.
    orphan_s: Annotated[float, Field(gt=0)] = 15.0
    # How often a gateway beats for its batches, keeps their answers and looks for batches to run.
    check_every_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    # Whether a batch's requests spend its key's rpm and tpm (a batch is its key's traffic). False:
    # as OpenAI's batches, they leave the key's limits to its live requests (and polls), and only
    # ``concurrency`` and ``max_running`` bound what batches take.
    key_limits: bool = True


class BreakerConfig(BaseModel):
    """Per-variant circuit breaker: open on consecutive failures or a high error rate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    consecutive_failures: Annotated[int, Field(ge=1)] = 5
    error_rate: Annotated[float, Field(gt=0, le=1)] = 0.5
    window: Annotated[int, Field(ge=1)] = 20
    min_requests: Annotated[int, Field(ge=1)] = 10
    cooldown_s: Annotated[float, Field(gt=0)] = 10.0
    half_open_probes: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _rate_can_trip(self) -> BreakerConfig:
        if self.min_requests > self.window:  # the window never holds that many: the rate never trips
            raise ValueError(
                f"min_requests {self.min_requests} exceeds window {self.window}: the breaker keeps the "
                f"last {self.window} outcomes, so its error rate could never trip (to trip on "
                "consecutive failures alone, say error_rate: 1)"
            )
        return self


class CanarySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # How often the canary controller judges running canaries.
    tick_s: Annotated[float, Field(gt=0, le=60)] = 1.0


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # LiteLLM's, Triton's and vLLM's names for what is below: an unknown key that is one of them
    # is told what it is here (deploy.unknown_keys).
    TERMS_ELSEWHERE: ClassVar[dict[str, str]] = CONFIG_TERMS

    server: ServerSettings = ServerSettings()
    # Validated like a written section, so a bad $TURNOUT_STORE_URL is reported as store.url.
    store: StoreSettings = Field(default_factory=dict, validate_default=True)
    auth: AuthSettings = AuthSettings()
    shadow: ShadowSettings = ShadowSettings()
    responses: ResponsesSettings = ResponsesSettings()
    batches: BatchSettings = BatchSettings()
    breaker: BreakerConfig = BreakerConfig()
    canary: CanarySettings = CanarySettings()
    # Variants declared by a deploy spec (serving/spec_variants.py); each one's id is the spec's.
    specs: list[SpecVariant] = []
    variants: Annotated[dict[str, VariantSettings], Field(validate_default=True)] = {}
    routes: Annotated[dict[str, RouteSpec], Field(min_length=1)]

    @field_validator("variants")
    @classmethod
    def _add_spec_variants(
        cls, variants: dict[str, VariantSettings], info: ValidationInfo
    ) -> dict[str, VariantSettings]:
        merged = dict(variants)
        for entry in info.data.get("specs", []):
            spec = entry.loaded
            for taken in (spec.id, spec.name):
                if taken in merged:
                    raise ValueError(
                        f"spec {entry.spec} (name {spec.name!r}, id {spec.id}) clashes with variant {taken!r}"
                    )
            merged[spec.id] = entry.settings
        if not merged and "specs" in info.data:
            raise ValueError("declare at least one variant (under variants: or specs:)")
        return merged

    @field_validator("routes")
    @classmethod
    def _spec_names_to_ids(cls, routes: dict[str, RouteSpec], info: ValidationInfo) -> dict[str, RouteSpec]:
        for name in routes:
            problem = route_name_problem(name)
            if problem:
                raise ValueError(problem)
        aliases = spec_aliases(entry.loaded for entry in info.data.get("specs", []))
        return {name: route.renamed(aliases) for name, route in routes.items()}

    @property
    def variant_aliases(self) -> dict[str, str]:
        """Spec name → variant id of every spec-declared variant (admin writes accept either)."""
        return spec_aliases(entry.loaded for entry in self.specs)

    @property
    def spec_names(self) -> dict[str, str]:
        """Variant id → spec name (``turnout_variant_info``'s ``spec`` label): every variant whose
        settings came from a spec (``specs:``, a rendered Ray app or Deployment) or name one."""
        return {name: settings.spec_name for name, settings in self.variants.items() if settings.spec_name}

    @model_validator(mode="after")
    def _routes_name_known_variants(self) -> GatewayConfig:
        tasks = {
            name: settings.task if isinstance(settings, OpenAIHttpSettings) else None
            for name, settings in self.variants.items()
        }
        found = _route_problems(self.routes, frozenset(self.variants), tasks)
        if found:
            raise ValueError("\n  ".join(found))
        return self


def default_config() -> GatewayConfig:
    """The shipped model in fp32, int8 and int4, one public name each, open to any client."""
    names = {"fp32": DEFAULT_MODEL, "int8": f"{DEFAULT_MODEL}-int8", "int4": f"{DEFAULT_MODEL}-int4"}
    variants: dict[str, EmbeddedSettings] = {
        name: EmbeddedSettings(precision=precision) for precision, name in names.items()
    }
    routes = {name: RouteSpec(targets=[WeightedTarget(variant=name)]) for name in names.values()}
    try:  # the environment ($TURNOUT_STORE_URL) can still make it invalid
        return GatewayConfig(variants=variants, routes=routes, auth=AuthSettings(anonymous_clients=True))
    except ValidationError as exc:
        raise _invalid("the default config", exc) from None


_VARIANT_KINDS = ("embedded", "openai_http", "triton")


def _field_path(loc: tuple[int | str, ...]) -> str:
    # Drop pydantic's union-member tag (variants.<name>.<kind>.…) so the path reads like the YAML.
    parts = list(loc)
    if len(parts) > 2 and parts[0] == "variants" and parts[2] in _VARIANT_KINDS:
        del parts[2]
    return ".".join(str(part) for part in parts)


def parse_config(data: object, source: str = "<config>", base_dir: Path | None = None) -> GatewayConfig:
    """Validate ``data``; ``specs:`` paths resolve against ``base_dir`` (default: the working folder)."""
    try:
        return GatewayConfig.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        raise _invalid(source, exc, _route_problems_besides(exc, data)) from None


def _route_problems_besides(exc: ValidationError, data: object) -> list[str]:
    """What the whole-config check would say of the routes that parsed, when a field error kept
    it from running (pydantic runs it only on a valid model): one start-up names both kinds.

    Variants are known by name even when their settings are invalid. A config with ``specs:``
    is left out: which names its specs declare needs them loaded."""
    if any(not error["loc"] for error in exc.errors()):  # the check did run
        return []
    if not isinstance(data, dict) or "specs" in data or not isinstance(data.get("routes"), dict):
        return []
    variants = data.get("variants")
    known = frozenset(str(name) for name in variants) if isinstance(variants, dict) else frozenset()
    parsed = {}
    for name, raw in data["routes"].items():
        with contextlib.suppress(ValidationError):  # its own field errors are already listed
            parsed[name] = RouteSpec.model_validate(raw)
    return _route_problems(parsed, known)


def _route_problems(
    routes: dict[Any, RouteSpec], known: frozenset[str], tasks: Mapping[str, str | None] | None = None
) -> list[str]:
    """Every route's every problem, one line each, so one start-up names them all."""
    return [
        f"routes.{name}.{problem}"
        for name, spec in routes.items()
        for problem in write_problems(spec, known, tasks)
    ]


def _invalid(source: str, exc: ValidationError, more: list[str] | None = None) -> ConfigError:
    """One line per error: the field path (as in the YAML) and the reason."""
    lines = [f"{source}: invalid gateway config"]
    for error in exc.errors():
        where = _field_path(error["loc"])
        message = plain_reason(error, GatewayConfig)
        # A whole-config check (a route naming an unknown variant) names its field itself.
        lines.append(f"  {where}: {message}" if where else f"  {message}")
    lines += [f"  {problem}" for problem in more or []]
    return ConfigError("\n".join(lines))


def load_config(path: Path) -> GatewayConfig:
    return parse_config(read_config_file(path), str(path), base_dir=path.resolve().parent)


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's mapping as written (not yet validated); a ConfigError naming what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (the byte at offset {exc.start} is not UTF-8)") from None
    try:
        data = strict_yaml.load(text, str(path))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data
