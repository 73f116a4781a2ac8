"""A pydantic validation error in the words of the file or body it came from (pure; no I/O).

Used wherever people's configuration is validated: gateway.yaml (``serving.config``), variant
specs (``deploy.spec``), and route specs from the admin API or ``turnout routes`` (``serving``).
pydantic's own wording stays, except where it names its own types ("a valid dictionary or
instance of BatchingSettings"), hides a likely typo (an unknown key: the nearest known one is
named, ``deploy.unknown_keys``) or speaks of tags and items where a person wrote a ``kind`` or
an empty section.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from deploy.unknown_keys import unknown_key_message

_MAPPINGS = frozenset({"model_type", "dict_type", "model_attributes_type"})


def plain_reason(
    error: ErrorDetails, model: type[BaseModel], *, mapping: str = "a mapping", noun: str = "key"
) -> str:
    """One error's reason, without its place (the caller names ``loc``); ``mapping`` is what the
    format calls an object ("a mapping" in YAML, "an object" in JSON)."""
    kind = error["type"]
    if kind == "extra_forbidden":  # a typo, most often: name the nearest key
        return unknown_key_message(model, error["loc"], noun=noun)
    if kind in _MAPPINGS:
        return f"must be {mapping}"
    if kind == "list_type":
        return "must be a list"
    if kind == "union_tag_invalid":  # "Input tag 'x' found using 'kind' does not match any of …"
        context = error.get("ctx") or {}
        field = str(context.get("discriminator", "")).strip("'")
        return f"{field} {context.get('tag')!r} is not one of: {context.get('expected_tags')}"
    if kind == "too_short" and isinstance(error.get("input"), dict | list) and not error.get("input"):
        return "must not be empty"
    return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
