"""Ray Serve: the config file (``serve deploy`` / KubeRay ``serveConfigV2``) for the gateway app.

Off the request path (``turnout deploy render --target ray`` writes ``ray/serve_config.yaml``).
One application, named after the spec, built by ``serving.ray_app:build_app`` with ``args``:
``variant_id`` (the spec's id), ``variant`` (the spec as written, defaults left out),
``gateway_replicas`` and, by engine:

- ``onnxruntime-genai`` (the embedded engine): ``model_source`` (where the engine replicas load
  the model: ``deploy.render.common.model_source``), or, in a container (the RayService) for the
  shipped model, ``shipped_model: true`` (the copy installed in the image). The engine runs
  inside Ray, one engine per replica of the ``TurnoutEngine`` deployment.
- every other engine (vLLM, ``trtllm-serve``, Triton) runs as its own server, as everywhere in
  Turnout: ``engine_url`` is where the gateway replicas reach it, by default the in-cluster
  Service that ``--target k8s`` renders next to the RayService (``http://<name>:8000``, plus
  ``/v1`` for the OpenAI servers). Edit it to point at the engine's server elsewhere.

Deployments, whose names that builder uses:

- ``TurnoutGateway``: the HTTP ingress, ``gateway_replicas`` (2) replicas, ``num_cpus: 1``.
- ``TurnoutRateCounter``: one replica, ``num_cpus: 0``: the per-key rate limits every gateway
  replica shares (``serving.ratelimit_shared``).
- ``TurnoutEngine`` (embedded engine only): ``num_replicas`` = ``replicas``, or with
  ``autoscaling`` an ``autoscaling_config`` (``min_replicas``, ``max_replicas``,
  ``initial_replicas`` = ``replicas``, ``target_ongoing_requests``) and ``max_ongoing_requests``
  = ``max_num_seqs`` (more would only queue inside the engine). ``ray_actor_options``: GPUs
  (NVIDIA and AMD alike are Ray ``GPU``s) ``num_gpus`` = ``device_count``; TPUs the custom
  resource ``TPU`` = ``device_count``; CPU engines none. ``num_cpus``: 1 per device, 4 for a
  CPU engine (its ONNX Runtime threads need cores; Ray only counts them).

Every gateway replica reads the route store named by ``TURNOUT_STORE_URL`` in its environment
(PostgreSQL across nodes; the RayService sets it from the ``turnout-store`` Secret).
``http_options``: host 0.0.0.0, port 8000; ``proxy_location: EveryNode``.
"""

from __future__ import annotations

from typing import Any

from deploy.render.common import (
    CPU_ENGINE_CPUS,
    HTTP_PORT,
    header,
    model_source,
    to_yaml,
    uses_shipped_model,
)
from deploy.spec import VariantSpec

IMPORT_PATH = "serving.ray_app:build_app"
GATEWAY_DEPLOYMENT = "TurnoutGateway"
ENGINE_DEPLOYMENT = "TurnoutEngine"
COUNTER_DEPLOYMENT = "TurnoutRateCounter"
GATEWAY_REPLICAS = 2  # two, so one can die or roll without an outage
GATEWAY_CPUS = 1
EMBEDDED_ENGINE = "onnxruntime-genai"
OPENAI_ENGINES = ("vllm", "trtllm")


def engine_in_ray(spec: VariantSpec) -> bool:
    """True when the spec's engine runs inside the Ray application (the embedded engine)."""
    return spec.engine == EMBEDDED_ENGINE


def engine_url(spec: VariantSpec) -> str:
    """Where the gateway reaches a separately served engine: the Service ``--target k8s`` renders."""
    base = f"http://{spec.name}:{HTTP_PORT}"
    return f"{base}/v1" if spec.engine in OPENAI_ENGINES else base


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


def app_args(spec: VariantSpec, *, container: bool = False) -> dict[str, Any]:
    """``build_app``'s arguments for ``spec``."""
    args: dict[str, Any] = {
        "variant_id": spec.id,
        "variant": spec.model_dump(mode="json", exclude_defaults=True),
        "gateway_replicas": GATEWAY_REPLICAS,
    }
    if engine_in_ray(spec) and container and uses_shipped_model(spec):
        args["shipped_model"] = True  # the image's own copy: no volume to fill
    elif engine_in_ray(spec):
        args["model_source"] = model_source(spec, container=container)
    else:
        args["engine_url"] = engine_url(spec)
    return args


def deployments(spec: VariantSpec) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {
            "name": GATEWAY_DEPLOYMENT,
            "num_replicas": GATEWAY_REPLICAS,
            "ray_actor_options": {"num_cpus": GATEWAY_CPUS},
        },
        {"name": COUNTER_DEPLOYMENT, "num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
    ]
    if engine_in_ray(spec):
        found.append(engine_deployment(spec))
    return found


def serve_config(spec: VariantSpec, *, container: bool = False) -> dict[str, Any]:
    """The Ray Serve config (``ServeDeploySchema`` shape); ``container`` picks in-container paths."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": HTTP_PORT},
        "applications": [
            {
                "name": spec.name,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": app_args(spec, container=container),
                "deployments": deployments(spec),
            }
        ],
    }


def render_ray(spec: VariantSpec) -> dict[str, str | bytes]:
    """``ray/serve_config.yaml`` for ``spec`` (any engine)."""
    return {"ray/serve_config.yaml": header(spec) + to_yaml(serve_config(spec))}
