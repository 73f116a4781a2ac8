"""Ray Serve: the config file (``serve deploy`` / KubeRay ``serveConfigV2``) for the gateway app.

Off the request path (``turnout deploy render --target ray`` writes ``ray/serve_config.yaml``).
One application, named after the spec, built by ``serving.ray_app:build_app`` with ``args``:
``variant_id`` (the spec's id), ``variant`` (the spec as written, defaults left out) and
``model_source`` (where the engine loads the model: ``deploy.render.common.model_source``).
Two deployments, whose names that builder must use:

- ``TurnoutGateway``: the HTTP ingress, one replica, ``num_cpus: 1``.
- ``TurnoutEngine``: the engine replicas. ``num_replicas`` = ``replicas``, or with
  ``autoscaling`` an ``autoscaling_config`` (``min_replicas``, ``max_replicas``,
  ``initial_replicas`` = ``replicas``, ``target_ongoing_requests``) and ``max_ongoing_requests``
  = ``max_num_seqs`` (more would only queue inside the engine). ``ray_actor_options``: GPUs
  (NVIDIA and AMD alike are Ray ``GPU``s) ``num_gpus`` = ``device_count``; TPUs the custom
  resource ``TPU`` = ``device_count``; CPU engines none. ``num_cpus``: 1 per device, 4 for a
  CPU engine (its ONNX Runtime threads need cores; Ray only counts them).

``http_options``: host 0.0.0.0, port 8000; ``proxy_location: EveryNode``.
"""

from __future__ import annotations

from typing import Any

from deploy.render.common import CPU_ENGINE_CPUS, HTTP_PORT, header, model_source, to_yaml
from deploy.spec import VariantSpec

IMPORT_PATH = "serving.ray_app:build_app"
GATEWAY_DEPLOYMENT = "TurnoutGateway"
ENGINE_DEPLOYMENT = "TurnoutEngine"


def actor_options(spec: VariantSpec) -> dict[str, Any]:
    """``ray_actor_options`` of one engine replica."""
    if spec.vendor == "cpu":
        return {"num_cpus": CPU_ENGINE_CPUS}
    options: dict[str, Any] = {"num_cpus": spec.device_count}
    if spec.vendor == "google":
        options["resources"] = {"TPU": spec.device_count}
    else:
        options["num_gpus"] = spec.device_count
    return options


def engine_deployment(spec: VariantSpec) -> dict[str, Any]:
    deployment: dict[str, Any] = {"name": ENGINE_DEPLOYMENT}
    scaling = spec.autoscaling
    if scaling is None:
        deployment["num_replicas"] = spec.replicas
    else:
        deployment["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas,
            "initial_replicas": spec.replicas,
            "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": scaling.target_ongoing_requests,
        }
    deployment["max_ongoing_requests"] = spec.batching.max_num_seqs
    deployment["ray_actor_options"] = actor_options(spec)
    return deployment


def serve_config(spec: VariantSpec, *, container: bool = False) -> dict[str, Any]:
    """The Ray Serve config (``ServeDeploySchema`` shape); ``container`` picks in-container paths."""
    variant = spec.model_dump(mode="json", exclude_defaults=True)
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": HTTP_PORT},
        "applications": [
            {
                "name": spec.name,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": {
                    "variant_id": spec.id,
                    "variant": variant,
                    "model_source": model_source(spec, container=container),
                },
                "deployments": [
                    {"name": GATEWAY_DEPLOYMENT, "num_replicas": 1, "ray_actor_options": {"num_cpus": 1}},
                    engine_deployment(spec),
                ],
            }
        ],
    }


def render_ray(spec: VariantSpec) -> dict[str, str | bytes]:
    """``ray/serve_config.yaml`` for ``spec`` (any engine)."""
    return {"ray/serve_config.yaml": header(spec) + to_yaml(serve_config(spec))}
