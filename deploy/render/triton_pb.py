"""Triton ``config.pbtxt`` built from Triton's own model-config protobuf, never from text templates.

Off the request path (``turnout deploy render --target triton``). A model config is written as a
plain dict in the protobuf's JSON form and parsed into ``tritonclient.grpc.model_config_pb2.
ModelConfig`` with ``json_format.ParseDict``, which rejects any field name or enum value the
schema does not have; ``google.protobuf.text_format`` then prints the text Triton reads. The
protobuf modules ship without type information, so they are reached only through this wrapper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format, text_format  # type: ignore[import-untyped]

from deploy.render import RenderError

try:
    from tritonclient.grpc import model_config_pb2  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("rendering a Triton repository needs tritonclient[grpc]") from exc


def tensor(
    name: str,
    data_type: str,
    dims: Sequence[int],
    *,
    optional: bool = False,
    ragged: bool = False,
    scalar: bool = False,
) -> dict[str, Any]:
    """One ``input``/``output`` entry: ``data_type`` like ``TYPE_INT32``; ``scalar`` reshapes [1] → []."""
    entry: dict[str, Any] = {"name": name, "data_type": data_type, "dims": list(dims)}
    if scalar:
        entry["reshape"] = {"shape": []}
    if optional:
        entry["optional"] = True
    if ragged:
        entry["allow_ragged_batch"] = True
    return entry


def parameters(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``parameters`` map entries (Triton passes every value as a string)."""
    return {key: {"string_value": value} for key, value in values.items()}


def message(config: Mapping[str, Any]) -> Any:
    """``config`` (protobuf JSON form) as a ``ModelConfig`` message; a field or enum value the
    schema does not have, or a value out of its field's range, raises ``RenderError``."""
    try:
        return json_format.ParseDict(dict(config), model_config_pb2.ModelConfig())
    except json_format.ParseError as exc:
        name = config.get("name", "?")
        raise RenderError(f"Triton model config {name}: {exc}") from None


def config_text(config: Mapping[str, Any]) -> str:
    """The ``config.pbtxt`` text for ``config`` (validated against the schema on the way)."""
    text: str = text_format.MessageToString(message(config))
    return text


def parse_text(text: str) -> Any:
    """A ``config.pbtxt`` parsed back into a ``ModelConfig`` (for checks and tests)."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())
