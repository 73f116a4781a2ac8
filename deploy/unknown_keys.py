"""'Did you mean …?' for a key a strict pydantic config refuses (pure; no I/O).

Used where gateway configs (``serving.config``) and variant specs (``deploy.spec``) turn
validation errors into messages: an ``extra_forbidden`` error is most often a typo, so the
message names the nearest key the model knows at any depth (from its JSON schema).
"""

from __future__ import annotations

import difflib
import functools

from pydantic import BaseModel


@functools.cache
def known_keys(model: type[BaseModel]) -> tuple[str, ...]:
    """Every key ``model`` may hold, at any depth."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                found.update(properties)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(model.model_json_schema())
    return tuple(sorted(found))


def unknown_key_message(model: type[BaseModel], loc: tuple[int | str, ...], noun: str = "key") -> str:
    """``unknown key; did you mean 'x'?`` for the refused key at the end of ``loc``."""
    key = str(loc[-1]) if loc else ""
    known = known_keys(model)
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if not near:  # a word of one key only: `rate` for `sample_rate`, `timeout` for `timeout_s`
        near = [name for name in known if key and key in name.split("_")]
    return f"unknown {noun}; did you mean '{near[0]}'?" if len(near) == 1 else f"unknown {noun}"
