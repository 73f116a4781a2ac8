"""'Did you mean …?' for a key a strict pydantic config refuses (pure; no I/O).

Used where gateway configs (``serving.config``), variant specs (``deploy.spec``) and route specs
turn validation errors into messages: an ``extra_forbidden`` error is most often a typo, a key
put in the wrong section, or another tool's name for a field, so the message names, in that
order of certainty:

- the field another tool's name stands for, when the model lists it in ``TERMS_ELSEWHERE`` (vLLM's
  ``gpu_memory_utilization`` is a spec's ``kv_cache.memory_fraction``);
- the places where a key of exactly that name belongs (``max_model_len`` at a spec's top level:
  ``kv_cache.max_model_len``);
- the nearest known key (from the model's JSON schema), named with its section when it sits in
  another one; a ``*`` in a place stands for a name of one's own (``variants.<name>.batching``).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping

from pydantic import BaseModel

_MAX_PLACES = 3  # named at most; more and the key is too common to point anywhere


@functools.cache
def _schema_places(
    model: type[BaseModel],
) -> tuple[dict[str, tuple[str, ...]], dict[str, frozenset[tuple[str, str]]]]:
    """Every key ``model`` may hold with its dotted places (``*``: a mapping's own names; list
    items take their list's place), and for a place inside one member of a tagged union, the
    tags that have it (``("kind", "openai_http")``)."""
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {})
    found: dict[str, set[str]] = {}
    owners: dict[str, set[tuple[str, str]]] = {}

    def walk(node: object, prefix: str, seen: frozenset[str], tag: tuple[str, str] | None = None) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, prefix, seen)
            return
        if not isinstance(node, dict):
            return
        reference = node.get("$ref")
        if isinstance(reference, str):
            name = reference.rsplit("/", 1)[-1]
            if name not in seen:  # a model that holds itself: once is enough
                walk(definitions.get(name), prefix, seen | {name}, tag)
        properties = node.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                found.setdefault(key, set()).add(prefix + key)
                if tag is not None:
                    owners.setdefault(prefix + key, set()).add(tag)
                walk(sub, f"{prefix}{key}.", seen)
        discriminator = node.get("discriminator")
        if isinstance(discriminator, dict) and isinstance(discriminator.get("mapping"), dict):
            field = str(discriminator.get("propertyName"))
            for value, target in discriminator["mapping"].items():
                walk({"$ref": target}, prefix, seen, (field, str(value)))
        else:
            walk(node.get("oneOf"), prefix, seen)
        for combined in ("anyOf", "allOf", "items", "prefixItems"):
            walk(node.get(combined), prefix, seen)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            walk(extra, prefix + "*.", seen)

    walk(schema, "", frozenset())
    places = {key: tuple(sorted(where)) for key, where in found.items()}
    return places, {place: frozenset(tags) for place, tags in owners.items()}


def key_places(model: type[BaseModel]) -> Mapping[str, tuple[str, ...]]:
    """Every key ``model`` may hold, at any depth, with its dotted places."""
    return _schema_places(model)[0]


def _shown(place: str) -> str:
    return place.replace("*", "<name>")


def _fits(pattern: list[str], written: list[str], after_name: bool = False) -> bool:
    """Whether a section's place (``variants.*.batching``) is the one written
    (``variants.local.embedded.batching``: a union's tag may follow a name of one's own)."""
    if not pattern:
        return not written or (after_name and len(written) == 1)
    if not written:
        return False
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return _fits(rest, written[1:], after_name=True)
    if head == written[0] and _fits(rest, written[1:]):
        return True
    return after_name and _fits(pattern, written[1:])  # skip the tag


def _beside(place: str, loc: tuple[int | str, ...]) -> bool:
    """Whether ``place`` (a known key's) is in the section the refused key at ``loc`` was
    written in (list indices do not count)."""
    section = place.split(".")[:-1]
    return _fits(section, [str(part) for part in loc[:-1] if not isinstance(part, int)])


def _named(key: str, places: tuple[str, ...], loc: tuple[int | str, ...]) -> list[str]:
    if any(_beside(place, loc) for place in places):
        return [key]
    return [_shown(place) for place in places]


def _having(tags: list[tuple[str, str]]) -> str:
    """``only kind 'triton' has it``, ``only kinds 'openai_http' and 'triton' have it``."""
    if not tags:
        return "it belongs to another kind of this section"
    field = tags[0][0]
    values = [f"'{value}'" for _, value in tags]
    if len(values) == 1:
        return f"only {field} {values[0]} has it"
    return f"only {field}s {', '.join(values[:-1])} and {values[-1]} have it"


def _related(key: str, name: str) -> bool:
    """A word of ``name`` (``rate`` of ``sample_rate``) or its first six letters and more
    (``quantize`` of ``quantization``)."""
    return key in name.split("_") or (len(key) >= 6 and name[:6] == key[:6])


def unknown_key_message(model: type[BaseModel], loc: tuple[int | str, ...], noun: str = "key") -> str:
    """``unknown key; did you mean 'x'?`` for the refused key at the end of ``loc``."""
    key = str(loc[-1]) if loc else ""
    terms: Mapping[str, str] = getattr(model, "TERMS_ELSEWHERE", {})
    if key in terms:
        return f"unknown {noun}; {terms[key]}"
    places = key_places(model)
    near: list[str] = []
    if key in places:  # a key of that name, refused here
        beside = [place for place in places[key] if _beside(place, loc)]
        if beside:  # a section that is a union: another member has it
            owners = _schema_places(model)[1]
            tags = sorted({tag for place in beside for tag in owners.get(place, ())})
            return f"unknown {noun}; {_having(tags)}"
        near = [_shown(place) for place in places[key]]
    else:
        # Best first; a loose relation only when nothing is close, and then only if one key has it.
        close = difflib.get_close_matches(key, list(places), n=5, cutoff=0.75)
        ranked = bool(close)
        if not ranked:
            close = [name for name in places if key and _related(key, name)]
        here = [name for name in close if any(_beside(place, loc) for place in places[name])]
        if here and (ranked or len(here) == 1):  # this section's own key first
            near = [here[0]]
        elif close and (ranked or len(close) == 1):
            near = _named(close[0], places[close[0]], loc)
    if not near or len(near) > _MAX_PLACES:
        return f"unknown {noun}"
    return f"unknown {noun}; did you mean " + " or ".join(f"'{name}'" for name in near) + "?"
