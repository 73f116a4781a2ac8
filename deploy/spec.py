"""Variant spec: one deployable model configuration, as a typed, frozen, validated object (YAML on disk).

Off the request path: operators write a spec, ``turnout deploy validate`` and ``turnout plan`` check
it before launch, and renderers (``deploy.render``) turn it into each engine's own configuration.
``VariantSpec.id`` (a hash of the spec) is the gateway's variant id for what it deploys.
This module checks structure only (types, ranges, known names); whether the combination works
on the hardware and fits in memory is ``deploy.validate``'s job.

Fields (YAML keys; every model is ``extra="forbid"``, so a misspelt key is an error; YAML lists
are tuples in Python; every integer is at most 2**31 - 1, the engines' and Kubernetes' int32;
numbers and booleans are strict: ``true`` is not 1, ``"3"`` is not 3, ``"on"`` is not true, but
an integer is a float; no ``.inf`` / ``.nan``):

``name`` (str, required): lowercase DNS label (``[a-z]([-a-z0-9]*[a-z0-9])?``, ≤ 63 chars), so
    it can name Kubernetes objects (the ``k8s`` target takes at most 43: see
    ``deploy.render.k8s.K8S_NAME_MAX``); also the served model name unless ``model.served_name``.
``model`` (ModelRef, required): exactly one of
    ``path`` (str): a local Hugging Face folder; relative paths are relative to the spec file;
    ``architecture`` (str): a named architecture from ``deploy.model_facts`` (e.g. ``llama-3-8b``),
    plus ``served_name`` (str | None): the model name the engine announces (default: ``name``);
    not starting with ``-``, which engines' command lines would read as an option.
    Facts (layers, heads, …) are resolved lazily by ``VariantSpec.facts()``.
``engine``: ``vllm`` | ``trtllm`` (``trtllm-serve``) | ``triton-trtllm`` (Triton, TensorRT-LLM
    backend) | ``triton-vllm`` (Triton, vLLM backend) | ``onnxruntime-genai`` (the embedded CPU engine).
``task``: ``generate`` (default) | ``embed``: an embedding variant (``/v1/embeddings``; vLLM's
    pooling runner, or the embedded engine, which serves both); other engines are refused.
``vendor``: ``nvidia`` | ``amd`` | ``google`` | ``cpu``; must match the accelerator's vendor.
``accelerator`` (str): a name from ``deploy.accelerators`` (``h100-80gb``, ``mi300x``, ``tpu-v5e``…).
``device_count`` (int ≥ 1, default 1): devices per replica (GPUs, GCDs, TPU chips, CPU sockets);
    must equal ``tensor_parallel × pipeline_parallel``. It is the Kubernetes device request.
``dtype``: ``fp32`` | ``fp16`` | ``bf16`` (default ``bf16``): weights and activations when not
    quantized; the activation dtype when quantized.
``quantization`` (default ``none``): ``none`` | ``fp8`` (fp8 weights and activations) |
    ``int8-wa`` (int8 weights and activations, W8A8 / SmoothQuant) | ``awq-int4`` | ``gptq-int4``
    (4-bit weight-only, group size 128, a pre-quantized checkpoint) | ``ort-int8`` | ``ort-int4``
    (ONNX Runtime GenAI builder's ``-p int8`` / ``-p int4``).
``tensor_parallel``, ``pipeline_parallel`` (int ≥ 1, default 1).
``kv_cache`` (KvCacheSpec):
    ``dtype``: ``auto`` (= the activation dtype) | ``fp16`` | ``bf16`` | ``fp8`` (default ``auto``);
    ``block_size`` (int, power of two 1…256, default 16): tokens per KV block (vLLM
    ``--block-size``, TensorRT-LLM ``tokens_per_block``);
    ``memory_fraction`` (0 < f ≤ 1, default 0.9): the share of each device's memory the engine
    may use for weights + activations + KV cache (vLLM ``--gpu-memory-utilization``; TensorRT-LLM
    gets ``free_gpu_memory_fraction`` of what is left after weights);
    ``max_model_len`` (int | None, default None = the model's max context): longest sequence;
    ``prefix_caching`` (bool, default False): reuse KV blocks of shared prompt prefixes.
``batching`` (BatchingSpec):
    ``max_num_seqs`` (int ≥ 1, default 256): sequences decoded together (Triton: max batch size);
    ``max_num_batched_tokens`` (int | None, default None = engine default): tokens per step;
    ``max_queue_delay_us`` (int ≥ 0, default 0): Triton dynamic batcher / embedded batcher delay;
    ``preferred_batch_sizes`` (list of int, default []): Triton dynamic batcher preferences.
``cuda_graphs`` (CudaGraphsSpec): ``enabled`` (bool, default False: vLLM gets ``--enforce-eager``)
    and ``capture_sizes`` (ascending list of batch sizes, default [] = the engine's own list).
``replicas`` (int ≥ 1, default 1): replicas to start (initial replicas when autoscaling).
``autoscaling`` (AutoscalingSpec | None, default None = fixed ``replicas``): ``min_replicas``
    (≥ 0), ``max_replicas`` (≥ 1), ``target_ongoing_requests`` (> 0, per replica, Ray Serve's term).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from deploy import accelerators, strict_yaml
from deploy.accelerators import Vendor
from deploy.field_errors import plain_reason
from deploy.model_facts import ModelFacts, ModelFactsError, facts_from_hf_folder, named_facts
from deploy.spec_engine_terms import ENGINE_TERMS

Engine = Literal["vllm", "trtllm", "triton-trtllm", "triton-vllm", "onnxruntime-genai"]
ENGINES: tuple[Engine, ...] = ("vllm", "trtllm", "triton-trtllm", "triton-vllm", "onnxruntime-genai")
Dtype = Literal["fp32", "fp16", "bf16"]
Quantization = Literal["none", "fp8", "int8-wa", "awq-int4", "gptq-int4", "ort-int8", "ort-int4"]
KvDtype = Literal["auto", "fp16", "bf16", "fp8"]
# What the variant serves: generation (chat, completions, Responses) or embeddings
# (/v1/embeddings: the normalized last hidden state, vLLM's ``--runner pooling --convert embed``).
Task = Literal["generate", "embed"]

# Every spec integer reaches an engine or Kubernetes field that is a 32-bit signed integer
# (Triton's max_batch_size and preferred_batch_size, Kubernetes replicas, vLLM's and TensorRT-LLM's
# C++ sizes), so none may exceed it: past it the engine refuses the value, or wraps it.
INT32_MAX = 2**31 - 1
# Strict(): numbers and booleans must be written as such. Lax pydantic read `tensor_parallel: true`
# as 1, `prefix_caching: "on"` as True and `replicas: "3"` as 3; a whole-model strict=True would
# also refuse YAML lists for the tuple fields, so each number and bool field is strict instead
# (a strict float still takes an int: `memory_fraction: 1`).
_Count = Annotated[int, Strict(), Field(ge=1, le=INT32_MAX)]
_Natural = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
_Fraction = Annotated[float, Strict(), Field(gt=0, le=1)]
_Positive = Annotated[float, Strict(), Field(gt=0)]
# allow_inf_nan=False: YAML's .inf / .nan are floats, and no spec number means anything infinite
_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SpecError(Exception):
    """An invalid variant spec: unreadable, malformed, or (``deploy.validate.check``) unsupported."""


class ModelRef(BaseModel):
    model_config = _STRICT

    path: str | None = None
    architecture: str | None = None
    served_name: str | None = None
    _base_dir: Path | None = PrivateAttr(default=None)
    _source: str | None = PrivateAttr(default=None)  # the spec file, for facts() errors
    _facts: ModelFacts | None = PrivateAttr(default=None)

    @field_validator("served_name")
    @classmethod
    def _not_an_option(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("-"):
            raise ValueError(
                f"{value!r} starts with '-': engines' command lines (vLLM --served-model-name, "
                "trtllm-serve's model) would read it as an option"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> ModelRef:
        if (self.path is None) == (self.architecture is None):
            raise ValueError("give exactly one of path (a local HF folder) or architecture (a named one)")
        if isinstance(info.context, dict):
            if isinstance(info.context.get("base_dir"), Path):
                self._base_dir = info.context["base_dir"]
            if isinstance(info.context.get("source"), str):
                self._source = info.context["source"]
        return self

    def resolved_path(self) -> Path | None:
        """``path`` made absolute against the spec file's folder (None for a named architecture)."""
        if self.path is None:
            return None
        path = Path(self.path).expanduser()
        if not path.is_absolute() and self._base_dir is not None:
            path = self._base_dir / path
        return path.resolve()

    def facts(self) -> ModelFacts:
        """The model's facts, read once (config.json for a path); raises ``SpecError`` naming the
        spec file and the field: the spec cannot be understood (not a reason it would not deploy)."""
        if self._facts is None:
            try:
                folder = self.resolved_path()
                if folder is not None:
                    self._facts = facts_from_hf_folder(folder)
                else:
                    self._facts = named_facts(str(self.architecture))
            except ModelFactsError as exc:
                field = "model.path" if self.path is not None else "model.architecture"
                where = f"{self._source}: " if self._source else ""
                raise SpecError(f"{where}{field}: {exc}") from None
        return self._facts


class KvCacheSpec(BaseModel):
    model_config = _STRICT

    dtype: KvDtype = "auto"
    block_size: Annotated[int, Strict(), Field(ge=1, le=256)] = 16
    memory_fraction: _Fraction = 0.9
    max_model_len: _Count | None = None
    prefix_caching: StrictBool = False

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"must be a power of two, got {value}")
        return value


def _ascending(values: tuple[int, ...]) -> tuple[int, ...]:
    if list(values) != sorted(set(values)):
        raise ValueError("must be strictly ascending")
    return values


class BatchingSpec(BaseModel):
    model_config = _STRICT

    max_num_seqs: _Count = 256
    max_num_batched_tokens: _Count | None = None
    max_queue_delay_us: _Natural = 0
    preferred_batch_sizes: tuple[_Count, ...] = ()

    _sorted = field_validator("preferred_batch_sizes")(_ascending)


class CudaGraphsSpec(BaseModel):
    model_config = _STRICT

    enabled: StrictBool = False
    capture_sizes: tuple[_Count, ...] = ()

    _sorted = field_validator("capture_sizes")(_ascending)


class AutoscalingSpec(BaseModel):
    model_config = _STRICT

    min_replicas: _Natural = 1
    max_replicas: _Count = 1
    target_ongoing_requests: _Positive = 16.0

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} > max_replicas {self.max_replicas}")
        return self


class VariantSpec(BaseModel):
    model_config = _STRICT
    # vLLM's, TensorRT-LLM's, Triton's and Ray Serve's names for the fields below: an unknown key
    # that is one of them is told the field it stands for (deploy.unknown_keys).
    TERMS_ELSEWHERE: ClassVar[dict[str, str]] = ENGINE_TERMS

    name: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63)]  # a DNS label
    model: ModelRef
    engine: Engine
    task: Task = "generate"
    vendor: Vendor
    accelerator: str
    device_count: _Count = 1
    dtype: Dtype = "bf16"
    quantization: Quantization = "none"
    tensor_parallel: _Count = 1
    pipeline_parallel: _Count = 1
    kv_cache: KvCacheSpec = KvCacheSpec()
    batching: BatchingSpec = BatchingSpec()
    cuda_graphs: CudaGraphsSpec = CudaGraphsSpec()
    replicas: _Count = 1
    autoscaling: AutoscalingSpec | None = None

    @field_validator("accelerator")
    @classmethod
    def _known_accelerator(cls, value: str) -> str:
        try:
            accelerators.get(value)
        except accelerators.UnknownAccelerator as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _replicas_in_bounds(self) -> VariantSpec:
        scaling = self.autoscaling
        if scaling is not None and not scaling.min_replicas <= self.replicas <= scaling.max_replicas:
            raise ValueError(
                f"replicas {self.replicas} is outside autoscaling bounds "
                f"[{scaling.min_replicas}, {scaling.max_replicas}]"
            )
        return self

    @property
    def id(self) -> str:
        """The variant id: first 12 hex digits of sha256 over the canonical JSON of the spec.

        Canonical: ``name`` left out (renaming keeps the id), fields at their default left out
        (so writing a default explicitly, or a later release adding a defaulted field, keeps the
        id), keys sorted, no whitespace. ``model.path`` counts as written, not resolved.
        """
        body = self.model_dump(mode="json", exclude={"name"}, exclude_defaults=True)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.name

    def facts(self) -> ModelFacts:
        return self.model.facts()

    def max_model_len(self) -> int:
        """``kv_cache.max_model_len``, or the model's max context when unset (resolves facts)."""
        return self.kv_cache.max_model_len or self.facts().max_context

    def on(self, accelerator: accelerators.Accelerator) -> VariantSpec:
        """The same spec on another accelerator (vendor follows); not re-validated."""
        return self.model_copy(update={"accelerator": accelerator.name, "vendor": accelerator.vendor})


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_spec(data: object, source: str = "<spec>", base_dir: Path | None = None) -> VariantSpec:
    """Validate ``data`` (parsed YAML); errors list ``source`` and every field path with its reason."""
    try:
        return VariantSpec.model_validate(data, context={"base_dir": base_dir, "source": source})
    except ValidationError as exc:
        lines = [f"{source}: invalid variant spec"]
        for error in exc.errors():
            where = _field_path(error["loc"]) or "(top level)"
            lines.append(f"  {where}: {plain_reason(error, VariantSpec, noun='field')}")
        raise SpecError("\n".join(lines)) from None


def load_spec(path: Path) -> VariantSpec:
    """Read a spec YAML file; relative ``model.path`` resolves against the file's folder."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec: {exc.strerror}") from None
    try:
        data: Any = strict_yaml.load(text, str(path))
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return parse_spec(data, str(path), base_dir=path.resolve().parent)
