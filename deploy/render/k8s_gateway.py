"""The gateway.yaml an embedded-engine Deployment serves: the spec's one variant, as the spec says.

Off the request path (``turnout deploy render --target k8s``, for an ``onnxruntime-genai`` spec).
The engine runs inside the gateway, so the Deployment's pods run ``turnout serve --config`` on a
ConfigMap (``<name>-gateway``) holding this config: one variant keyed by the spec's id (so
``x-turnout-variant``, the metrics and stored routes name the exact configuration, as in a
gateway's ``specs:``), with the spec's precision, batching and context, and one route, the served
name. The same settings the Ray application derives at start (``serving.ray_app``), written out.

Where the weights are: the model shipped inside the image when the spec's ``model.path`` is the
shipped Hugging Face folder (no volume needed), else ``/models/<name>``, which must hold the
spec's ONNX Runtime GenAI build (the folder with ``genai_config.json`` that ``turnout model build``
writes for its precision) on the ``turnout-models`` volume.
"""

from __future__ import annotations

from typing import Any

from deploy.render.common import MODELS_MOUNT, embedded_batching, ort_precision, uses_shipped_model
from deploy.spec import VariantSpec

GATEWAY_CONFIG_DIR = "/etc/turnout"
GATEWAY_CONFIG_FILE = "gateway.yaml"
STORE_SECRET = "turnout-store"  # key ``url``: a route store the replicas share, when it exists


def gateway_config(spec: VariantSpec) -> dict[str, Any]:
    """``gateway.yaml`` for the Deployment's ``turnout serve``: the spec's variant and its route."""
    variant: dict[str, Any] = {
        "kind": "embedded",
        "model_dir": None if uses_shipped_model(spec) else f"{MODELS_MOUNT}/{spec.name}",
        "precision": ort_precision(spec),
        "accelerator": spec.accelerator,
        "batching": embedded_batching(spec),
        "max_model_len": spec.kv_cache.max_model_len,
        "spec_name": spec.name,  # turnout_variant_info's spec label: the id's name
    }
    return {
        "variants": {spec.id: variant},
        "routes": {spec.served_name: {"targets": [{"variant": spec.id}]}},
        # as `turnout serve` with no config, and the Ray application: clients need no key until
        # an operator issues keys and turns this off
        "auth": {"anonymous_clients": True},
    }


def store_env() -> dict[str, Any]:
    """``TURNOUT_STORE_URL`` from the ``turnout-store`` Secret when there is one: replicas then
    share routes, keys and audit; without it each pod keeps its own SQLite file."""
    secret = {"name": STORE_SECRET, "key": "url", "optional": True}
    return {"name": "TURNOUT_STORE_URL", "valueFrom": {"secretKeyRef": secret}}
