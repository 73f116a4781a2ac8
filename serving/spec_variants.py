"""Variants declared by a deploy spec (``specs:`` in gateway.yaml): spec → adapter settings.

Read once with the config (``serving/config.py``), off the request path. A spec-declared
variant's id is the spec's stable id (``deploy.spec.VariantSpec.id``, a hash of what the spec
says, not of its name): response headers (``x-turnout-variant``), metrics labels and route
versions keep naming the same configuration when a spec file is renamed, and name a new one
when the configuration changes. Routes and admin writes may name such a variant by spec name;
:func:`spec_aliases` gives the name → id table they are rewritten with.

``specs:`` entries::

    specs:
      - spec: ../deploy/examples/tiny-cpu.yaml       # relative to gateway.yaml
      - spec: llama8b-h100.yaml
        base_url: http://10.0.0.7:8000/v1            # where its engine serves (vllm, trtllm)
      - spec: llama8b-triton.yaml
        url: http://10.0.0.8:8000                    # Triton's HTTP base (triton-*)

The engine decides the adapter: ``onnxruntime-genai`` runs embedded (in-process) from the ONNX
Runtime GenAI build next to the spec's Hugging Face folder (``<model>/hf`` → ``<model>/int4``,
the layout ``turnout model build`` writes); ``vllm`` and ``trtllm`` (``trtllm-serve``) go through
the OpenAI adapter with the vendor's preset; ``triton-trtllm`` and ``triton-vllm`` through the
Triton adapter with TensorRT-LLM's ensemble or the vLLM backend's tensors. Every spec is checked
with ``deploy.validate`` first, so a variant that would not fit its accelerator never loads.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, PrivateAttr, ValidationInfo, model_validator

from backends.settings import (
    BatchingSettings,
    EmbeddedSettings,
    OpenAIHttpSettings,
    TritonSettings,
    VariantSettings,
)
from deploy.render.common import embedded_batching
from deploy.spec import SpecError, VariantSpec, load_spec
from deploy.validate import ORT_PRECISIONS
from deploy.validate import problems as spec_problems

VLLM_PRESETS = {"nvidia": "vllm-cuda", "amd": "vllm-rocm", "google": "vllm-tpu", "cpu": "vllm-cpu"}


class SpecVariant(BaseModel):
    """One ``specs:`` entry: the spec file and where its engine serves (remote engines only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: Path
    base_url: HttpUrl | None = None  # vllm, trtllm: the OpenAI server's /v1 base
    replicas: tuple[HttpUrl, ...] = ()  # vllm, trtllm: more servers of the same variant
    url: HttpUrl | None = None  # triton-*: Triton's HTTP base
    grpc_url: Annotated[str, Field(pattern=r"^[^/\s]+:\d+$")] | None = None  # triton-*: host:port
    _loaded: VariantSpec | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _load(self, info: ValidationInfo) -> SpecVariant:
        """Read, validate and convert the spec now, so a bad one fails with the config."""
        context = info.context if isinstance(info.context, dict) else {}
        base_dir = context.get("base_dir")
        spec = load_spec_variant(self, base_dir if isinstance(base_dir, Path) else Path.cwd())
        variant_settings(spec, self)  # raises on a missing or superfluous endpoint
        self._loaded = spec
        return self

    @property
    def loaded(self) -> VariantSpec:
        if self._loaded is None:
            raise RuntimeError("SpecVariant was built without validation")
        return self._loaded

    @property
    def settings(self) -> VariantSettings:
        return variant_settings(self.loaded, self)


class SpecVariantError(ValueError):
    """A ``specs:`` entry that cannot become a variant; the message starts with its field."""


def load_spec_variant(entry: SpecVariant, base_dir: Path) -> VariantSpec:
    """Read and validate the entry's spec file (relative paths against gateway.yaml's folder)."""
    path = entry.spec if entry.spec.is_absolute() else base_dir / entry.spec
    try:
        spec = load_spec(path)
        found = spec_problems(spec)  # SpecError too when the model's facts cannot be read
    except SpecError as exc:
        raise SpecVariantError(f"spec: {exc}") from None
    if found:
        raise SpecVariantError(f"spec: {path} ({spec.id}) would not deploy: " + "; ".join(found))
    return spec


def _embedded(spec: VariantSpec, entry: SpecVariant) -> EmbeddedSettings:
    if entry.base_url or entry.url or entry.grpc_url or entry.replicas:
        raise SpecVariantError("base_url: an onnxruntime-genai spec runs in-process; give no endpoint")
    precision = ORT_PRECISIONS.get(spec.quantization)
    if precision is None:
        raise SpecVariantError(
            f"spec: quantization {spec.quantization!r} has no ONNX Runtime GenAI build "
            f"(expected one of: {', '.join(ORT_PRECISIONS)})"
        )
    hf = spec.model.resolved_path()
    if hf is None:
        raise SpecVariantError("spec: an embedded variant needs model.path (a local folder)")
    model_dir = hf if (hf / "genai_config.json").is_file() else hf.parent / precision
    if not (model_dir / "genai_config.json").is_file():
        raise SpecVariantError(
            f"spec: no ONNX Runtime GenAI build at {model_dir} (genai_config.json missing); "
            "build it with `turnout model build` or point model.path at one"
        )
    batching = BatchingSettings.model_validate(embedded_batching(spec))
    return EmbeddedSettings(
        model_dir=model_dir,
        precision=precision,
        accelerator=spec.accelerator,
        batching=batching,
        max_model_len=spec.kv_cache.max_model_len,
    )


def _openai_http(spec: VariantSpec, entry: SpecVariant, preset: str) -> OpenAIHttpSettings:
    if entry.base_url is None:
        raise SpecVariantError(f"base_url: a {spec.engine} spec needs its server's /v1 base URL")
    data: dict[str, Any] = {
        "preset": preset,
        "base_url": entry.base_url,
        "replicas": entry.replicas,
        "model": spec.served_name,
        "vendor": spec.vendor,
        "accelerator": spec.accelerator,
        "task": spec.task,  # vLLM's runner serves one: generation or embeddings
    }
    return OpenAIHttpSettings.model_validate(data)


def _triton(spec: VariantSpec, entry: SpecVariant) -> TritonSettings:
    if entry.url is None and entry.grpc_url is None:
        raise SpecVariantError(f"url: a {spec.engine} spec needs Triton's url or grpc_url")
    data: dict[str, Any] = {
        "preset": "trtllm-ensemble" if spec.engine == "triton-trtllm" else "triton-vllm",
        "url": entry.url,
        "grpc_url": entry.grpc_url,
        "protocol": "generate" if entry.url is not None else "grpc",
        "vendor": spec.vendor,
        "accelerator": spec.accelerator,
    }
    if spec.engine == "triton-vllm":
        data["model"] = spec.name  # deploy.render.triton names the vLLM-backend model after the spec
    return TritonSettings.model_validate(data)


def variant_settings(spec: VariantSpec, entry: SpecVariant) -> VariantSettings:
    """The adapter settings that serve ``spec`` (pure; ``entry`` says where remote engines are),
    carrying the spec's name wherever the settings go (a Ray application's config too)."""
    settings: VariantSettings
    if spec.engine == "onnxruntime-genai":
        settings = _embedded(spec, entry)
    elif spec.engine == "vllm":
        settings = _openai_http(spec, entry, VLLM_PRESETS[spec.vendor])
    elif spec.engine == "trtllm":
        settings = _openai_http(spec, entry, "trtllm-serve")
    else:
        settings = _triton(spec, entry)
    return settings.model_copy(update={"spec_name": spec.name})


def spec_aliases(specs: Iterable[VariantSpec]) -> dict[str, str]:
    """Spec name → variant id, for routes that name spec variants by name."""
    return {spec.name: spec.id for spec in specs}
