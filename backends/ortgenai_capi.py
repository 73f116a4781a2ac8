"""ONNX Runtime GenAI through its own C API (ctypes): the embedded engine's compute without the GIL.

Sits under :mod:`backends.ortgenai_runner`, on the dynamic batcher's worker thread. The
library's Python binding holds the GIL for the whole of every call, so each decode step
(0.1-1 ms on this model) stopped the gateway's event loop, and every other request with it,
and the loop's per-token work (events, socket writes) could never overlap a step. The same
library's C API (``libonnxruntime-genai.so``, which the binding itself wraps) called through
``ctypes.CDLL`` releases the GIL for the duration of a call: the calls that compute (model
load, prompt append, a decode step) go that way. Quick getters go through ``ctypes.PyDLL``,
which keeps the GIL: re-taking it after each of them could wait a whole switch interval
(5 ms) behind a busy event loop.

Each object owns one C handle and destroys it when closed or collected.
"""

from __future__ import annotations

import ctypes
import json
import secrets
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    import onnxruntime_genai as _og
except ImportError as exc:  # pragma: no cover - the dependency is declared
    raise ImportError(
        "the embedded engine needs ONNX Runtime GenAI: pip install onnxruntime-genai==0.18.0"
    ) from exc

_P = ctypes.c_void_p
# The library the binding itself loads, as each platform's wheel names it.
_LIB_NAMES = ("libonnxruntime-genai.so", "libonnxruntime-genai.dylib", "onnxruntime-genai.dll")
_FLOAT32, _FLOAT16 = 1, 10  # OgaElementType


class GenAIError(RuntimeError):
    """An ONNX Runtime GenAI call failed; the message is the library's."""


def _bind(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> Any:
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


def library_path(folder: Path | None = None) -> Path:
    """ONNX Runtime GenAI's shared library inside its Python package (``folder``: for tests)."""
    folder = folder or Path(_og.__file__).parent
    for name in _LIB_NAMES:
        if (folder / name).is_file():
            return folder / name
    raise ImportError(
        f"ONNX Runtime GenAI's shared library ({' or '.join(_LIB_NAMES)}) is not in {folder}; "
        "reinstall it: pip install --force-reinstall onnxruntime-genai==0.18.0"
    )


class _Api:
    """The C functions used, bound once: ``compute`` ones release the GIL, the rest keep it."""

    def __init__(self) -> None:
        path = str(library_path())
        released = ctypes.CDLL(path)  # GIL released during each call
        held = ctypes.PyDLL(path)  # same library, GIL kept
        ptr, out, size = _P, ctypes.POINTER(_P), ctypes.c_size_t
        c_str = ctypes.c_char_p
        self.result_error = _bind(held, "OgaResultGetError", c_str, ptr)
        self.destroy_result = _bind(held, "OgaDestroyResult", None, ptr)
        self.create_config = _bind(held, "OgaCreateConfig", ptr, c_str, out)
        self.config_overlay = _bind(held, "OgaConfigOverlay", ptr, ptr, c_str)
        self.destroy_config = _bind(held, "OgaDestroyConfig", None, ptr)
        self.create_model = _bind(released, "OgaCreateModelFromConfig", ptr, ptr, out)
        self.destroy_model = _bind(held, "OgaDestroyModel", None, ptr)
        self.create_tokenizer = _bind(held, "OgaCreateTokenizer", ptr, ptr, out)
        self.destroy_tokenizer = _bind(held, "OgaDestroyTokenizer", None, ptr)
        self.create_sequences = _bind(held, "OgaCreateSequences", ptr, out)
        self.destroy_sequences = _bind(held, "OgaDestroySequences", None, ptr)
        self.sequence_count = _bind(held, "OgaSequencesGetSequenceCount", size, ptr, size)
        self.sequence_data = _bind(held, "OgaSequencesGetSequenceData", ptr, ptr, size)
        self.encode = _bind(held, "OgaTokenizerEncode", ptr, ptr, c_str, ptr)
        self.decode = _bind(held, "OgaTokenizerDecode", ptr, ptr, ptr, size, out)
        self.destroy_string = _bind(held, "OgaDestroyString", None, ptr)
        self.create_stream = _bind(held, "OgaCreateTokenizerStream", ptr, ptr, out)
        self.destroy_stream = _bind(held, "OgaDestroyTokenizerStream", None, ptr)
        self.stream_decode = _bind(
            held, "OgaTokenizerStreamDecode", ptr, ptr, ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p)
        )
        self.create_params = _bind(held, "OgaCreateGeneratorParams", ptr, ptr, out)
        self.destroy_params = _bind(held, "OgaDestroyGeneratorParams", None, ptr)
        self.set_number = _bind(held, "OgaGeneratorParamsSetSearchNumber", ptr, ptr, c_str, ctypes.c_double)
        self.set_bool = _bind(held, "OgaGeneratorParamsSetSearchBool", ptr, ptr, c_str, ctypes.c_bool)
        self.create_generator = _bind(held, "OgaCreateGenerator", ptr, ptr, ptr, out)
        self.destroy_generator = _bind(held, "OgaDestroyGenerator", None, ptr)
        self.append_tokens = _bind(released, "OgaGenerator_AppendTokens", ptr, ptr, ptr, size)
        self.generate_next_token = _bind(released, "OgaGenerator_GenerateNextToken", ptr, ptr)
        self.next_tokens = _bind(
            held,
            "OgaGenerator_GetNextTokens",
            ptr,
            ptr,
            ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
            ctypes.POINTER(size),
        )
        self.is_done = _bind(held, "OgaGenerator_IsDone", ctypes.c_bool, ptr)
        self.get_output = _bind(held, "OgaGenerator_GetOutput", ptr, ptr, c_str, out)
        self.destroy_tensor = _bind(held, "OgaDestroyTensor", None, ptr)
        self.tensor_type = _bind(held, "OgaTensorGetType", ptr, ptr, ctypes.POINTER(ctypes.c_int))
        self.tensor_rank = _bind(held, "OgaTensorGetShapeRank", ptr, ptr, ctypes.POINTER(size))
        self.tensor_shape = _bind(held, "OgaTensorGetShape", ptr, ptr, ctypes.POINTER(ctypes.c_int64), size)
        self.tensor_data = _bind(held, "OgaTensorGetData", ptr, ptr, out)

    def check(self, result: int | None) -> None:
        """Raise the library's error if a call returned an ``OgaResult``."""
        if result:
            message = self.result_error(result)
            self.destroy_result(result)
            text = message.decode("utf-8", "replace") if message else "ONNX Runtime GenAI call failed"
            raise GenAIError(text)


_api: _Api | None = None


def api() -> _Api:
    global _api
    if _api is None:
        _api = _Api()
    return _api


def _owned(owner: object, handle: _P, destroy: Callable[[int], None]) -> Callable[[], None]:
    """Destroy ``handle`` when ``owner`` is collected, or earlier by calling what this returns."""
    return weakref.finalize(owner, destroy, handle.value or 0)


class Model:
    """A model folder's ONNX sessions and its tokenizer (one C model, one C tokenizer)."""

    def __init__(self, folder: Path, overlay: dict[str, Any] | None = None) -> None:
        c = api()
        config = _P()
        c.check(c.create_config(str(folder).encode(), ctypes.byref(config)))
        try:
            if overlay:
                c.check(c.config_overlay(config, json.dumps(overlay).encode()))
            handle = _P()
            c.check(c.create_model(config, ctypes.byref(handle)))
        finally:
            c.destroy_config(config)
        self.handle = handle
        self._close_model = _owned(self, handle, c.destroy_model)
        tokenizer = _P()
        c.check(c.create_tokenizer(handle, ctypes.byref(tokenizer)))
        self.tokenizer = tokenizer
        self._close_tokenizer = _owned(self, tokenizer, c.destroy_tokenizer)

    def encode(self, text: str) -> np.ndarray:
        c = api()
        sequences = _P()
        c.check(c.create_sequences(ctypes.byref(sequences)))
        try:
            c.check(c.encode(self.tokenizer, text.encode("utf-8"), sequences))
            count = c.sequence_count(sequences, 0)
            data = ctypes.cast(c.sequence_data(sequences, 0), ctypes.POINTER(ctypes.c_int32))
            return np.ctypeslib.as_array(data, (count,)).copy() if count else np.zeros(0, np.int32)
        finally:
            c.destroy_sequences(sequences)

    def decode(self, ids: np.ndarray) -> str:
        c = api()
        tokens = np.ascontiguousarray(ids, dtype=np.int32)
        text = _P()
        c.check(c.decode(self.tokenizer, tokens.ctypes.data, tokens.size, ctypes.byref(text)))
        if not text.value:
            return ""
        try:
            return ctypes.string_at(text).decode("utf-8", "replace")
        finally:
            c.destroy_string(text)

    def stream(self) -> TokenizerStream:
        return TokenizerStream(self)


class TokenizerStream:
    """Decodes one sequence token by token, holding back incomplete characters."""

    def __init__(self, model: Model) -> None:
        c = api()
        handle = _P()
        c.check(c.create_stream(model.tokenizer, ctypes.byref(handle)))
        self._model = model  # the stream must not outlive its tokenizer
        self._handle = handle
        self._close = _owned(self, handle, c.destroy_stream)
        self._text = ctypes.c_char_p()  # the stream owns the string; ``.value`` copies it
        self._text_ref = ctypes.byref(self._text)
        self._decode = c.stream_decode

    def decode(self, token: int) -> str:
        """The text this token completes (``""`` while a character's bytes are incomplete)."""
        result = self._decode(self._handle, token, self._text_ref)
        if result:
            api().check(result)
        text = self._text.value
        return text.decode("utf-8", "replace") if text else ""


class Generator:
    """One batch's decode state. ``search`` holds the search options (numbers and booleans).

    A generator made without a ``random_seed`` gets one drawn here. Left unset, the library
    seeds from ``std::random_device``, whose ``rdseed`` retry loop cost ~0.75 ms of a 0.77 ms
    generator here (a greedy one too, which never draws): as much as 15 decode steps, paid by
    every request at batch size 1 and added to its time to first token."""

    def __init__(self, model: Model, search: dict[str, float | bool]) -> None:
        c = api()
        params = _P()
        c.check(c.create_params(model.handle, ctypes.byref(params)))
        try:
            for name, value in {"random_seed": secrets.randbits(31), **search}.items():
                if isinstance(value, bool):
                    c.check(c.set_bool(params, name.encode(), value))
                else:
                    c.check(c.set_number(params, name.encode(), float(value)))
            handle = _P()
            c.check(c.create_generator(model.handle, params, ctypes.byref(handle)))
        finally:
            c.destroy_params(params)
        self._model = model
        self._handle = handle
        self.close = _owned(self, handle, c.destroy_generator)
        self._tokens = ctypes.POINTER(ctypes.c_int32)()
        self._count = ctypes.c_size_t()

    def append_tokens(self, tokens: np.ndarray) -> None:
        """Append ``tokens`` (batch × length; every row the same length) and run the prompt pass."""
        ids = np.ascontiguousarray(tokens, dtype=np.int32)
        api().check(api().append_tokens(self._handle, ids.ctypes.data, ids.size))

    def generate_next_token(self) -> None:
        api().check(api().generate_next_token(self._handle))

    def next_tokens(self) -> list[int]:
        """The token each row just got (a copy: the library's buffer lives until the next call)."""
        c = api()
        c.check(c.next_tokens(self._handle, ctypes.byref(self._tokens), ctypes.byref(self._count)))
        return self._tokens[: self._count.value]

    def is_done(self) -> bool:
        return bool(api().is_done(self._handle))

    def output(self, name: str) -> np.ndarray:
        """A copy of the model output ``name`` from the last pass (float16 comes back as float32)."""
        c = api()
        tensor = _P()
        c.check(c.get_output(self._handle, name.encode(), ctypes.byref(tensor)))
        try:
            element, rank = ctypes.c_int(), ctypes.c_size_t()
            c.check(c.tensor_type(tensor, ctypes.byref(element)))
            c.check(c.tensor_rank(tensor, ctypes.byref(rank)))
            shape = (ctypes.c_int64 * rank.value)()
            c.check(c.tensor_shape(tensor, shape, rank.value))
            data = _P()
            c.check(c.tensor_data(tensor, ctypes.byref(data)))
            if element.value not in (_FLOAT32, _FLOAT16):
                raise GenAIError(f"output {name!r} has element type {element.value}, not a float")
            dtype = np.dtype(np.float32 if element.value == _FLOAT32 else np.float16)
            count = int(np.prod(list(shape))) if rank.value else 1
            buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(data.value or 0)
            array: np.ndarray = np.frombuffer(memoryview(buffer), dtype=dtype).reshape(tuple(shape))
            return array.astype(np.float32)  # a copy: the tensor is destroyed below
        finally:
            c.destroy_tensor(tensor)
