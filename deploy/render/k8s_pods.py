"""Kubernetes pod pieces shared by the engine Deployment and the KubeRay pods: devices, scheduling.

Off the request path (``turnout deploy render --target k8s``). Plain dicts in the API's JSON
shape; ``tests/integration/test_render_real.py`` round-trips them through the ``kubernetes``
client's models. Rules, stated:

- Devices: ``<catalog k8s_resource>: device_count`` as request and limit (``nvidia.com/gpu``,
  ``amd.com/gpu``, ``google.com/tpu``; none on CPU), with a ``NoSchedule`` toleration for that
  resource (GPU and TPU node pools are tainted with it). TPU pods also select their slice:
  ``cloud.google.com/gke-tpu-accelerator`` and ``cloud.google.com/gke-tpu-topology`` (the catalog's
  topology for ``device_count`` chips, one host).
- Host resources per pod: accelerators 4 CPUs per device, memory = all weights + 8 GiB (the
  checkpoint passes through host memory while loading), rounded up to GiB; CPU engines 4 CPUs
  and weights + KV cache of ``max_num_seqs`` full sequences + 1 GiB.
- Volumes: the ``turnout-models`` claim at ``/models`` (local model folders, TensorRT-LLM engines,
  Triton repositories, the Hugging Face cache) and a memory-backed ``/dev/shm`` (NCCL / PyTorch
  shared memory between tensor-parallel workers).
"""

from __future__ import annotations

import math
from typing import Any

from deploy import accelerators
from deploy.plan import GIB, weight_bytes
from deploy.render.common import (
    CPU_ENGINE_CPUS,
    MODELS_MOUNT,
    MODELS_VOLUME_CLAIM,
    cpu_kv_cache_gib,
    full_batch_kv_bytes,
    is_hub_id,
)
from deploy.spec import VariantSpec

CPUS_PER_DEVICE = 4
SHM_SIZE = "16Gi"


def device_resources(spec: VariantSpec) -> dict[str, str]:
    resource = accelerators.get(spec.accelerator).k8s_resource
    return {} if resource is None else {resource: str(spec.device_count)}


def host_resources(spec: VariantSpec) -> dict[str, str]:
    facts = spec.facts()
    weights = weight_bytes(facts, spec.dtype, spec.quantization)
    if spec.vendor == "cpu":  # a full batch's KV, capped at what the engine is given (cpu_kv_cache_gib)
        kv = min(full_batch_kv_bytes(spec), cpu_kv_cache_gib(spec) * GIB)
        return {"cpu": str(CPU_ENGINE_CPUS), "memory": f"{math.ceil((weights + kv) / GIB) + 1}Gi"}
    return {"cpu": str(CPUS_PER_DEVICE * spec.device_count), "memory": f"{math.ceil(weights / GIB) + 8}Gi"}


def resources(spec: VariantSpec, *, devices: bool = True) -> dict[str, Any]:
    amounts = {**host_resources(spec), **(device_resources(spec) if devices else {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def scheduling(spec: VariantSpec) -> dict[str, Any]:
    """``nodeSelector`` and ``tolerations`` for the spec's device (empty for CPU)."""
    acc = accelerators.get(spec.accelerator)
    placement: dict[str, Any] = {}
    if acc.gke_tpu_accelerator is not None:
        placement["nodeSelector"] = {
            "cloud.google.com/gke-tpu-accelerator": acc.gke_tpu_accelerator,
            "cloud.google.com/gke-tpu-topology": acc.tpu_topologies[spec.device_count],
        }
    if acc.k8s_resource is not None:
        placement["tolerations"] = [{"key": acc.k8s_resource, "operator": "Exists", "effect": "NoSchedule"}]
    return placement


def volumes() -> list[dict[str, Any]]:
    return [
        {"name": "models", "persistentVolumeClaim": {"claimName": MODELS_VOLUME_CLAIM}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
    ]


def volume_mounts() -> list[dict[str, Any]]:
    return [{"name": "models", "mountPath": MODELS_MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}]


def hub_env(spec: VariantSpec) -> list[dict[str, Any]]:
    """Hugging Face cache on the models volume, and ``HF_TOKEN`` (optional secret) for Hub ids."""
    env: list[dict[str, Any]] = [{"name": "HF_HOME", "value": f"{MODELS_MOUNT}/.cache/huggingface"}]
    if spec.model.path is None and is_hub_id(spec.served_name):
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}},
            }
        )
    return env


def http_probe(path: str, port: str, *, period: int, failures: int, delay: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {"httpGet": {"path": path, "port": port}, "periodSeconds": period}
    if delay:
        probe["initialDelaySeconds"] = delay
    probe["failureThreshold"] = failures
    return probe


def probes(ready_path: str, live_path: str, port: str = "http") -> dict[str, Any]:
    """Startup (up to 30 min: large checkpoints and engine warm-up), readiness and liveness."""
    return {
        "startupProbe": http_probe(ready_path, port, period=10, failures=180),
        "readinessProbe": http_probe(ready_path, port, period=5, failures=3),
        "livenessProbe": http_probe(live_path, port, period=10, failures=6),
    }
