"""Request body → wire model, and pydantic's errors → one OpenAI error a person can act on.

Called by the generation endpoints right after the body is read. pydantic reports a value that
fits no member of a union (``prompt``, ``stop``, a message's ``content``) once per member, and
the first of those is always "Input should be a valid string", whatever was sent. So: when one
member got further into the value than the others (a list of content parts with a part lacking
its ``type``), its error is the one reported, at its own place; when none did, the message says
what the field takes and what it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from deploy.field_errors import plain_reason
from serving.errors import ClientError

Wire = TypeVar("Wire", bound=BaseModel)

_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none"})
# What each union member's tag reads as: (one of it, several of it).
_NOUNS = {
    "str": ("a string", "strings"),
    "int": ("an integer", "integers"),
    "float": ("a number", "numbers"),
    "bool": ("true or false", "booleans"),
    "TextPart": ("a content part", "content parts"),
}
_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number"}


def is_union_tag(part: int | str) -> bool:
    """pydantic names the union member in an error location (``content.str``); users don't."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part or part.startswith("function-"))


def _noun(tag: str) -> tuple[str, str]:
    """``list[list[int]]`` → ("a list of lists of integers", "lists of lists of integers")."""
    if tag.startswith("list[") and tag.endswith("]"):
        plural = _noun(tag[5:-1])[1]
        return f"a list of {plural}", f"lists of {plural}"
    return _NOUNS.get(tag, (f"a {tag}", f"{tag} values"))


def _either(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES.items():
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, float) else type(value).__name__


def _union_position(loc: tuple[int | str, ...]) -> int | None:
    return next((i for i, part in enumerate(loc) if is_union_tag(part)), None)


def _place(loc: Sequence[int | str]) -> str | None:
    return ".".join(str(part) for part in loc if not is_union_tag(part)) or None


def _said(error: ErrorDetails, model: type[BaseModel]) -> tuple[str, str | None]:
    """One error as "place: reason", in JSON's words (``deploy.field_errors``)."""
    param = _place(error["loc"])
    reason = plain_reason(error, model, mapping="an object")
    return (f"{param}: {reason}" if param else reason), param


def _union_message(
    errors: list[ErrorDetails], at: int, model: type[BaseModel]
) -> tuple[str, str | None] | None:
    """For errors from one union: the furthest member's own error, or what the union takes."""
    prefix = errors[0]["loc"][:at]
    members: dict[str, list[ErrorDetails]] = {}
    for error in errors:
        loc = error["loc"]
        if loc[:at] == prefix and len(loc) > at and isinstance(loc[at], str) and is_union_tag(loc[at]):
            members.setdefault(str(loc[at]), []).append(error)
    if len(members) < 2:
        return None
    reach = {tag: max(len(e["loc"]) for e in found) for tag, found in members.items()}
    furthest = max(reach.values())
    leaders = [tag for tag, depth in reach.items() if depth == furthest]
    if furthest > at + 1 and len(leaders) == 1:  # one member matched the value's shape and went in
        return _said(members[leaders[0]][0], model)
    field = _place(prefix)
    takes = _either([_noun(tag)[0] for tag in members])
    got = _json_type(members[next(iter(members))][0].get("input"))
    return f"{field}: must be {takes}; got {got}", field


def validation_message(exc: ValidationError, model: type[BaseModel]) -> tuple[str, str | None]:
    """The message and ``param`` of the 400 for a body that does not fit its wire model."""
    errors = exc.errors()
    error = errors[0]
    at = _union_position(error["loc"])
    if at is not None:
        found = _union_message(errors, at, model)
        if found is not None:
            return found
    if not error["loc"] and error["type"] == "model_type":
        return "the request body must be a JSON object", None
    return _said(error, model)


def parse_wire(model: type[Wire], body: bytes) -> Wire:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "json_invalid":
            raise ClientError(
                "We could not parse the JSON body of your request: " + exc.errors()[0]["msg"],
                code="invalid_json",
            ) from None
        message, param = validation_message(exc, model)
        raise ClientError(message, param=param, code="invalid_value") from None
