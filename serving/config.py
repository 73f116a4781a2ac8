"""Gateway configuration: ``gateway.yaml`` → a validated :class:`GatewayConfig`.

Read once by ``serving.cli`` before the app starts; an invalid file fails here with the
file, the field path and the reason, never later while serving. With no file, the
default config serves the shipped model in its three precisions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from backends.settings import EmbeddedSettings, VariantSettings
from serving.errors import ConfigError
from serving.routing.policy import RouteSpec, WeightedTarget

DEFAULT_MODEL = "turnout-tiny"


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1_048_576
    log_level: str = "info"


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    server: ServerSettings = ServerSettings()
    variants: Annotated[dict[str, VariantSettings], Field(min_length=1)]
    routes: Annotated[dict[str, RouteSpec], Field(min_length=1)]

    @model_validator(mode="after")
    def _routes_name_known_variants(self) -> GatewayConfig:
        for route, spec in self.routes.items():
            for index, target in enumerate(spec.targets):
                if target.variant not in self.variants:
                    known = ", ".join(sorted(self.variants))
                    raise ValueError(
                        f"routes.{route}.targets.{index}.variant: unknown variant "
                        f"'{target.variant}' (known: {known})"
                    )
        return self


def default_config() -> GatewayConfig:
    """The shipped model in fp32, int8 and int4, one public name each."""
    names = {"fp32": DEFAULT_MODEL, "int8": f"{DEFAULT_MODEL}-int8", "int4": f"{DEFAULT_MODEL}-int4"}
    variants: dict[str, EmbeddedSettings] = {
        name: EmbeddedSettings(precision=precision) for precision, name in names.items()
    }
    routes = {name: RouteSpec(targets=[WeightedTarget(variant=name)]) for name in names.values()}
    return GatewayConfig(variants=variants, routes=routes)


def _field_path(loc: tuple[int | str, ...]) -> str:
    # Drop pydantic's union-member tags (e.g. "embedded") so the path reads like the YAML.
    return ".".join(str(part) for part in loc if part not in ("embedded", "openai_http"))


def parse_config(data: object, source: str = "<config>") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid gateway config"]
        for error in exc.errors():
            where = _field_path(error["loc"]) or "(top level)"
            lines.append(f"  {where}: {error['msg']}")
        raise ConfigError("\n".join(lines)) from None


def load_config(path: Path) -> GatewayConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return parse_config(data, str(path))
