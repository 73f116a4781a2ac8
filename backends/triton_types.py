"""The value each Triton input takes: a request's fields are type-checked before anything is sent.

Pure (no I/O), on the request path inside ``backends/triton_tensors.py``. A value that could not
become its tensor used to fail in the transport: a ``TypeError`` building a gRPC numpy array, or
Triton's 500 "Unable to parse 'data'" over HTTP. Both were 502s, counted by the variant's
circuit breaker, so five requests from anyone took the variant away from everyone; and HTTP and
gRPC disagreed (``true`` as a penalty was a 502 on one, sent as 1.0 on the other). Now each is a
400 naming the field (``param``), the same on both protocols, in two steps:

* ``check_extras``: each extra field a convention passes on, against the kind of value it is,
  whatever the model (a penalty: a finite number; ``min_tokens``: a 32-bit integer;
  ``bad_words``: a string or a list of strings; …). ``null`` is the field left unset;
* ``check_input``: each input about to be sent, against the datatype the model's config
  declares (BOOL: true or false; INT*/UINT*: an integer in the type's range; FP*/BF16: a number
  finite at that width; BYTES: a string or a list of strings).

Booleans are never numbers, although Python's ``True == 1``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from serving.errors import ClientError

Kind = Literal["number", "int32", "int32s", "bool", "words"]
# Every extra field a convention maps (triton_tensors._MAPPED_EXTRAS), by the value it takes.
EXTRA_KINDS: dict[str, Kind] = {
    "bad_words": "words",
    "repetition_penalty": "number",
    "presence_penalty": "number",
    "frequency_penalty": "number",
    "length_penalty": "number",
    "min_p": "number",
    "min_tokens": "int32",
    "stop_token_ids": "int32s",
    "include_stop_str_in_output": "bool",
    "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool",
}
_INT32 = 2**31
# The largest finite value of each floating datatype (FP64: any finite double).
_FLOAT_MAX = {"FP16": 65504.0, "BF16": 3.3895313892515355e38, "FP32": 3.4028234663852886e38, "FP64": math.inf}


def describe(value: Any) -> str:
    """A client's value, in a few words for an error message (never the whole of a big one)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 32 else text[:29] + "..."
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _refuse(message: str, param: str) -> ClientError:
    return ClientError(message, param=param, code="invalid_value")


def is_number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    """An int, not a bool (JSON's ``2.0`` is a float: not an integer)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_words(value: Any) -> bool:
    """A string, or a list of strings."""
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _finite(value: Any, largest: float = math.inf) -> bool:
    try:
        number = float(value)
    except OverflowError:  # an int past any double
        return False
    return math.isfinite(number) and abs(number) <= largest


def _check_int32(name: str, value: Any) -> None:
    if not is_integer(value):
        raise _refuse(f"{name} must be an integer, got {describe(value)}", name)
    if not -_INT32 <= value < _INT32:  # an INT32 tensor: past that it would wrap
        raise _refuse(f"{name} must fit a 32-bit integer, got {describe(value)}", name)


def check_extra_value(name: str, kind: Kind, value: Any) -> Any:
    """``value`` of the extra field ``name`` if it is of ``kind`` (``bad_words``' one string as a list)."""
    if kind == "number":
        if not is_number(value) or not _finite(value):
            raise _refuse(f"{name} must be a finite number, got {describe(value)}", name)
    elif kind == "int32":
        _check_int32(name, value)
    elif kind == "int32s":
        if not isinstance(value, list) or not all(is_integer(v) for v in value):
            raise _refuse(f"{name} must be a list of integers, got {describe(value)}", name)
        for item in value:
            _check_int32(name, item)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _refuse(f"{name} must be true or false, got {describe(value)}", name)
    elif not is_words(value):  # "words"
        raise _refuse(f"{name} must be a string or a list of strings, got {describe(value)}", name)
    elif isinstance(value, str):
        return [value] if value else []
    return value


def check_extras(extras: Mapping[str, Any]) -> dict[str, Any]:
    """The extra fields to pass on, each checked against its kind; a ``null`` one is left out."""
    checked: dict[str, Any] = {}
    for name, value in extras.items():
        if value is None:
            continue
        kind = EXTRA_KINDS.get(name)
        checked[name] = value if kind is None else check_extra_value(name, kind, value)
    return checked


def _expected(datatype: str) -> str | None:
    """What a ``datatype`` input takes, in words; None for a datatype not checked here."""
    if datatype == "BOOL":
        return "true or false"
    if datatype.startswith(("INT", "UINT")):
        return "an integer"
    if datatype in _FLOAT_MAX:
        return "a number"
    if datatype == "BYTES":
        return "a string or a list of strings"
    return None


def _problem(value: Any, datatype: str) -> Literal["kind", "range"] | None:
    """Why one item cannot be a ``datatype`` element: not of its kind, out of its range, or None."""
    if datatype == "BOOL":
        return None if isinstance(value, bool) else "kind"
    if datatype.startswith(("INT", "UINT")):
        if not is_integer(value):
            return "kind"
        bits = int(datatype.removeprefix("U").removeprefix("INT"))
        low, high = (0, 2**bits) if datatype.startswith("U") else (-(2 ** (bits - 1)), 2 ** (bits - 1))
        return None if low <= value < high else "range"
    if datatype in _FLOAT_MAX:
        if not is_number(value):
            return "kind"
        return None if _finite(value, _FLOAT_MAX[datatype]) else "range"
    return None if isinstance(value, str) else "kind"  # BYTES


def check_input(name: str, value: Any, datatype: str, *, param: str, model: str) -> None:
    """A 400 naming ``param`` unless ``value`` can become ``model``'s ``datatype`` input ``name``.

    A list is one item per element (a BYTES input's words); a datatype not known here is sent as is.
    """
    expected = _expected(datatype)
    if expected is None:
        return
    for item in value if isinstance(value, list) else [value]:
        problem = _problem(item, datatype)
        if problem is None:
            continue
        where = f"Triton model '{model}' takes {name} as {datatype}"
        if problem == "range":
            raise _refuse(f"{param} must fit {datatype} ({where}), got {describe(item)}", param)
        raise _refuse(f"{param} must be {expected} ({where}), got {describe(value)}", param)
