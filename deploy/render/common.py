"""Helpers every renderer shares: where the model is, labels, images, YAML and shell text.

Off the request path: ``turnout deploy render`` runs before launch. Everything here is pure (no
I/O beyond what ``VariantSpec.facts()`` reads once), so a spec always renders to the same bytes.

Where the weights are (``model_source``), stated once for every target:
- a spec with ``model.path`` runs from that local folder (resolved against the spec file) on this
  host, and from ``/models/<name>`` inside a container (the ``turnout-models`` volume);
- a spec naming an ``architecture`` whose served name looks like a Hugging Face Hub repo id
  (``org/name``) loads that id (the engine downloads it; ``HF_TOKEN`` comes from a secret);
- otherwise the weights are expected in ``/models/<name>`` (the operator puts them there).
Derived artifacts (TensorRT-LLM checkpoints and engines) live under ``/models/<name>/`` too.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from deploy import accelerators
from deploy.model.artifacts import HF_FOLDER, model_dir
from deploy.plan import cpu_kv_cache_gib as plan_cpu_kv_cache_gib
from deploy.plan import full_batch_kv_bytes as plan_full_batch_kv_bytes
from deploy.plan import memory_budget
from deploy.spec import VariantSpec
from deploy.validate import ORT_PRECISIONS

MODELS_MOUNT = "/models"
MODELS_VOLUME_CLAIM = "turnout-models"
HTTP_PORT = 8000
CPU_ENGINE_CPUS = 4  # cores a CPU engine replica asks for (its ONNX Runtime / vLLM threads)
VARIANT_LABEL = "turnout.dev/variant-id"
NAME_LABEL = "app.kubernetes.io/name"
VLLM_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Container images: defaults for the manifests (override them with kustomize or by editing the
# render). Engine images are the projects' published ones; Turnout publishes no image, so the
# gateway and Ray images are built from this repository with deploy/images/ (Dockerfile,
# ray.Dockerfile; tests/unit/test_images.py keeps their tags and Ray version in step with these).
IMAGES = {
    ("vllm", "nvidia"): "vllm/vllm-openai:v0.32.0",
    ("vllm", "amd"): "rocm/vllm:latest",
    ("vllm", "google"): "vllm/vllm-tpu:v0.32.0",
    ("vllm", "cpu"): "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
    ("trtllm", "nvidia"): "nvcr.io/nvidia/tensorrt-llm/release:1.0.0",
    ("triton-trtllm", "nvidia"): "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3",
    ("triton-vllm", "nvidia"): "nvcr.io/nvidia/tritonserver:25.08-vllm-python-py3",
    ("onnxruntime-genai", "cpu"): "turnout:0.1.0",
}
RAY_VERSION = "2.60.0"
RAY_IMAGES = {"cpu": "turnout-ray:0.1.0-cpu", "nvidia": "turnout-ray:0.1.0-cuda"}


def ray_image(vendor: str) -> str:
    """The Turnout-on-Ray image for ``vendor`` (Ray 2.60 + turnout + the engine)."""
    return RAY_IMAGES.get(vendor, f"turnout-ray:0.1.0-{vendor}")


def is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith(("/", ".", "~"))


def uses_shipped_model(spec: VariantSpec) -> bool:
    """True when the spec's model is the one shipped in the package (and so in Turnout's images)."""
    path = spec.model.resolved_path()
    return path is not None and path == (model_dir() / HF_FOLDER).resolve()


EMBEDDED_MAX_BATCH = 32  # ONNX Runtime GenAI batches at most this many prompts per generator


def embedded_batching(spec: VariantSpec) -> dict[str, int | float]:
    """The embedded engine's batching (``backends.settings.BatchingSettings``) for ``spec``: its
    ``max_num_seqs`` capped at what one generator batches, its queue delay in milliseconds."""
    return {
        "max_batch_size": min(spec.batching.max_num_seqs, EMBEDDED_MAX_BATCH),
        "max_queue_delay_ms": spec.batching.max_queue_delay_us / 1000,
    }


def model_source(spec: VariantSpec, *, container: bool = False) -> str:
    """The model folder or Hub id the engine loads (see the module docstring)."""
    local = spec.model.resolved_path()
    if local is not None:
        return f"{MODELS_MOUNT}/{spec.name}" if container else str(local)
    if is_hub_id(spec.served_name):
        return spec.served_name
    return f"{MODELS_MOUNT}/{spec.name}"


def work_dir(spec: VariantSpec) -> str:
    """Where derived artifacts (TensorRT-LLM checkpoint and engine) are written and read."""
    return f"{MODELS_MOUNT}/{spec.name}"


def ort_precision(spec: VariantSpec) -> str:
    """The ONNX Runtime GenAI build folder name for the spec's quantization."""
    return ORT_PRECISIONS.get(spec.quantization, "fp32")  # validation refuses the others


def cpu_kv_cache_gib(spec: VariantSpec) -> int:
    """``VLLM_CPU_KVCACHE_SPACE`` for ``spec``: ``deploy.plan.cpu_kv_cache_gib`` on its own
    accelerator, the same whole GiB the capacity check (``MemoryBudget.kv_granted``) counts."""
    budget = memory_budget(spec, spec.facts(), accelerators.get(spec.accelerator))
    return plan_cpu_kv_cache_gib(spec, spec.facts(), budget.kv_room)


def full_batch_kv_bytes(spec: VariantSpec) -> int:
    """KV cache bytes of ``max_num_seqs`` sequences at the full context."""
    return plan_full_batch_kv_bytes(spec, spec.facts())


def labels(spec: VariantSpec, component: str) -> dict[str, str]:
    return {
        NAME_LABEL: spec.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "turnout",
        VARIANT_LABEL: spec.id,
    }


def selector_labels(spec: VariantSpec, component: str) -> dict[str, str]:
    """The labels that select ``spec``'s pods of ``component`` (Deployment, Service, PodMonitor).

    Stable across spec edits: no variant id. A Deployment's ``spec.selector`` is immutable in
    apps/v1, so a selector holding the id (a hash of the spec) would make ``kubectl apply`` of an
    edited variant fail; the id stays a pod template label and annotation, so an edit still rolls
    the pods, and during the rollout old and new pods both match (the Service serves both).
    ``component`` keeps the engine's selectors off the same variant's Ray pods.
    """
    return {NAME_LABEL: spec.name, "app.kubernetes.io/component": component}


def variant_annotations(spec: VariantSpec) -> dict[str, str]:
    return {
        VARIANT_LABEL: spec.id,
        "turnout.dev/engine": spec.engine,
        "turnout.dev/accelerator": spec.accelerator,
        "turnout.dev/served-model-name": spec.served_name,
    }


def object_metadata(spec: VariantSpec, name: str, component: str) -> dict[str, Any]:
    """A Kubernetes object's ``metadata``: its name, the spec's labels and annotations."""
    return {"name": name, "labels": labels(spec, component), "annotations": variant_annotations(spec)}


def header(spec: VariantSpec, comment: str = "#") -> str:
    """Comment lines naming the variant the file was rendered from."""
    return (
        f"{comment} Rendered by `turnout deploy render` from variant {spec.name} ({spec.id}).\n"
        f"{comment} Re-render from the spec instead of editing: the variant id names this exact spec.\n"
    )


class _Dumper(yaml.SafeDumper):
    """Block style, no aliases, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(data: Any) -> str:
    """Deterministic YAML: keys in insertion order, block style."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def yaml_documents(documents: Iterable[Mapping[str, Any]]) -> str:
    return "---\n".join(to_yaml(dict(doc)) for doc in documents)


class Raw(str):
    """A shell word written as is (e.g. ``"$MODEL_DIR"``): ``shell_command`` does not quote it."""

    __slots__ = ()


def shell_command(argv: Iterable[str], indent: str = "  ") -> str:
    """``argv`` shell-quoted (``Raw`` words as is): the command and its positional words on the
    first line, then one option (with its value, if any) per continued line."""
    lines: list[str] = []
    for word in argv:
        text = word if isinstance(word, Raw) else shlex.quote(word)
        option = text.startswith("-") and len(text) > 1
        if (
            lines
            and not option
            and ((len(lines) == 1 and not lines[0].startswith("-")) or " " not in lines[-1])
        ):
            lines[-1] += f" {text}"
        else:
            lines.append(text)
    return f" \\\n{indent}".join(lines)


def shell_script(spec: VariantSpec, body: str) -> str:
    return f"#!/bin/sh\n{header(spec)}set -eu\n{body}"
