"""Kubernetes manifests: the engine server (Deployment + Service) and a KubeRay RayService.

Off the request path (``turnout deploy render --target k8s`` writes ``k8s/deployment.yaml``,
``k8s/service.yaml``, ``k8s/rayservice.yaml``, for TensorRT-LLM and the embedded engine
``k8s/configmap.yaml`` and, for an autoscaled vLLM spec, ``k8s/scaledobject.yaml`` and
``k8s/podmonitor.yaml``).
Every object and pod template carries the label and annotation ``turnout.dev/variant-id: <spec
id>``, but nothing selects on it: selectors use ``common.selector_labels`` (name + component), which
an edit of the spec does not change (a Deployment's selector is immutable). Pod
resources, devices, TPU selectors, volumes and probes follow ``deploy.render.k8s_pods``.

The engine container, per engine:
- ``vllm``: the vendor's vLLM image running ``python3 -m vllm.entrypoints.openai.api_server``
  with the arguments and environment of ``deploy.render.vllm`` (model from ``/models`` or the
  Hub); probes on ``/health``.
- ``trtllm``: ``trtllm-serve`` (PyTorch backend) with the options YAML from a ConfigMap; ``/health``.
  Quantized weights (fp8, int8-wa, AWQ) are served, as by ``trtllm/serve.sh``, from the ModelOpt
  export at ``/models/<name>/quantized-hf``: run ``turnout deploy render --target trtllm``'s
  ``trtllm/quantize_hf.sh`` into that volume first (a Job on a GPU node); until then the pod
  fails its start rather than load the unquantized checkpoint the plan did not size.
- ``triton-trtllm`` / ``triton-vllm``: Triton's image running ``/models/<name>/triton/run.sh``
  (copy ``turnout deploy render --target triton`` output there; TensorRT-LLM's
  ``triton_backend`` checkout goes to ``/models/<name>/triton_backend``); probes on
  ``/v2/health/ready`` and ``/v2/health/live``; gRPC and metrics ports too.
- ``onnxruntime-genai``: the engine is in-process, so the Deployment runs the Turnout gateway
  itself (``turnout serve --config`` on the ``<name>-gateway`` ConfigMap that
  ``deploy.render.k8s_gateway`` writes: the spec's variant and route; image built with
  ``deploy/images/Dockerfile``); ``TURNOUT_STORE_URL`` from the ``turnout-store`` Secret when it
  exists; the ``turnout-models`` volume only when the weights are not the shipped model; probes on
  ``/ready``, ``/health``.

The RayService (``ray.io/v1``) runs the Turnout gateway application on Ray: it embeds
``deploy.render.ray_serve``'s config as ``serveConfigV2`` (in-container model paths), a CPU-only
head (``num-cpus: 0``: no replicas on it) and a ``gateway`` worker group (one 2-CPU pod per
gateway replica, ``TURNOUT_STORE_URL`` from the ``url`` key of the Secret ``turnout-store``: a
PostgreSQL URL every replica shares). For the embedded engine it adds an ``engine`` worker group
whose pods each hold one engine replica; its size follows ``replicas`` and, with
``autoscaling``, ``min_replicas``/``max_replicas`` with KubeRay's in-tree autoscaler on. Other
engines run as their own servers: apply the Deployment + Service too (with ``autoscaling``, a
vLLM Deployment also gets a KEDA ScaledObject and the PodMonitor it reads:
``deploy.render.k8s_autoscaling``); the gateways reach the
engine through that Service. For the embedded engine the Deployment + Service is the other way
to run the variant (plain ``turnout serve`` pods): apply one of the two.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.render import k8s_pods as pods
from deploy.render.common import (
    HTTP_PORT,
    IMAGES,
    MODELS_MOUNT,
    RAY_VERSION,
    header,
    labels,
    object_metadata,
    ray_image,
    selector_labels,
    to_yaml,
    uses_shipped_model,
    variant_annotations,
    work_dir,
    yaml_documents,
)
from deploy.render.k8s_autoscaling import pod_monitor, scaled_object
from deploy.render.k8s_gateway import (
    GATEWAY_CONFIG_DIR,
    GATEWAY_CONFIG_FILE,
    STORE_SECRET,
    gateway_config,
    store_env,
)
from deploy.render.ray_serve import EMBEDDED_ENGINE, GATEWAY_REPLICAS, engine_in_ray, serve_config
from deploy.render.trtllm import serve_options, served_model
from deploy.render.vllm import SERVER_MODULE, environment, server_args
from deploy.spec import VariantSpec

TRTLLM_CONFIG_DIR = "/etc/turnout"
GATEWAY_POD_RESOURCES = {"cpu": "2", "memory": "4Gi"}


def _ports(spec: VariantSpec) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    if spec.engine.startswith("triton-"):
        ports.append({"name": "grpc", "containerPort": HTTP_PORT + 1, "protocol": "TCP"})
        ports.append({"name": "metrics", "containerPort": HTTP_PORT + 2, "protocol": "TCP"})
    return ports


def _command(spec: VariantSpec) -> tuple[list[str], list[str], list[dict[str, Any]], dict[str, Any]]:
    """Container command, args, extra env and probes for the spec's engine."""
    if spec.engine == "vllm":
        env = [{"name": key, "value": value} for key, value in environment(spec).items()]
        return (
            ["python3", "-m", SERVER_MODULE],
            server_args(spec, container=True),
            env,
            pods.probes("/health", "/health"),
        )
    if spec.engine == "trtllm":
        options = f"{TRTLLM_CONFIG_DIR}/extra_llm_api_options.yaml"
        args = [
            served_model(spec), "--host", "0.0.0.0", "--port", str(HTTP_PORT),
            "--backend", "pytorch", "--extra_llm_api_options", options,
        ]  # fmt: skip
        return ["trtllm-serve"], args, [], pods.probes("/health", "/health")
    if spec.engine.startswith("triton-"):
        env = [{"name": "TRTLLM_BACKEND_SRC", "value": f"{work_dir(spec)}/triton_backend"}]
        probes = pods.probes("/v2/health/ready", "/v2/health/live")
        return ["/bin/sh"], [f"{work_dir(spec)}/triton/run.sh"], env, probes
    config = f"{GATEWAY_CONFIG_DIR}/{GATEWAY_CONFIG_FILE}"
    args = ["serve", "--config", config, "--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    return ["turnout"], args, [store_env()], pods.probes("/ready", "/health")


def _needs_models_volume(spec: VariantSpec) -> bool:
    """Every engine reads /models, except the embedded one serving the model its image ships."""
    return not (spec.engine == EMBEDDED_ENGINE and uses_shipped_model(spec))


def engine_container(spec: VariantSpec) -> dict[str, Any]:
    command, args, env, probes = _command(spec)
    if spec.engine == EMBEDDED_ENGINE:  # the gateway itself: its config, and /models only for other weights
        mounts = [{"name": "gateway-config", "mountPath": GATEWAY_CONFIG_DIR, "readOnly": True}]
        if _needs_models_volume(spec):
            mounts.insert(0, {"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True})
    else:
        mounts = pods.volume_mounts()
        env = [*env, *pods.hub_env(spec)]
    if spec.engine == "trtllm":
        mounts.append({"name": "trtllm-options", "mountPath": TRTLLM_CONFIG_DIR, "readOnly": True})
    return {
        "name": "engine",
        "image": IMAGES[(spec.engine, spec.vendor)],
        "command": command,
        "args": args,
        "ports": _ports(spec),
        "env": env,
        "resources": pods.resources(spec),
        "volumeMounts": mounts,
        **probes,
    }


def deployment(spec: VariantSpec) -> dict[str, Any]:
    volumes = pods.volumes()
    if spec.engine == EMBEDDED_ENGINE:
        volumes = volumes[:1] if _needs_models_volume(spec) else []
        volumes.append({"name": "gateway-config", "configMap": {"name": f"{spec.name}-gateway"}})
    if spec.engine == "trtllm":
        volumes.append({"name": "trtllm-options", "configMap": {"name": f"{spec.name}-trtllm"}})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(spec, spec.name, "engine"),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(spec, "engine")},
            "template": {
                "metadata": {"labels": labels(spec, "engine"), "annotations": variant_annotations(spec)},
                "spec": {
                    "containers": [engine_container(spec)],
                    "volumes": volumes,
                    "terminationGracePeriodSeconds": 60,
                    **pods.scheduling(spec),
                },
            },
        },
    }


def service(spec: VariantSpec) -> dict[str, Any]:
    ports = [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]} for p in _ports(spec)]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(spec, spec.name, "engine"),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(spec, "engine"),
            "ports": ports,
        },
    }


def gateway_config_map(spec: VariantSpec) -> dict[str, Any]:
    """The embedded engine's gateway.yaml (``deploy.render.k8s_gateway``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(spec, f"{spec.name}-gateway", "engine"),
        "data": {GATEWAY_CONFIG_FILE: to_yaml(gateway_config(spec))},
    }


def config_map(spec: VariantSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(spec, f"{spec.name}-trtllm", "engine"),
        "data": {"extra_llm_api_options.yaml": to_yaml(serve_options(spec))},
    }


def _ray_pod(spec: VariantSpec, container: dict[str, Any], *, worker: bool) -> dict[str, Any]:
    keep = _needs_models_volume(spec)  # not for the shipped model: Turnout's Ray image holds it
    volumes = [v for v in pods.volumes() if keep or v["name"] != "models"]
    mounts = [m for m in container.pop("volumeMounts", []) if keep or m["name"] != "models"]
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if worker:
        pod.update(pods.scheduling(spec))
    metadata = {"labels": labels(spec, "ray"), "annotations": variant_annotations(spec)}
    return {"metadata": metadata, "spec": pod}


def _worker_start_params(spec: VariantSpec) -> dict[str, str]:
    if spec.vendor == "google":
        return {"resources": json.dumps(json.dumps({"TPU": spec.device_count}))}
    if spec.vendor in ("nvidia", "amd"):
        return {"num-gpus": str(spec.device_count)}
    return {}


def _gateway_group(spec: VariantSpec) -> dict[str, Any]:
    store = {"secretKeyRef": {"name": STORE_SECRET, "key": "url"}}
    container = {
        "name": "ray-worker",
        "image": ray_image("cpu"),
        "env": [{"name": "TURNOUT_STORE_URL", "valueFrom": store}],
        "resources": {"requests": dict(GATEWAY_POD_RESOURCES), "limits": dict(GATEWAY_POD_RESOURCES)},
    }
    metadata = {"labels": labels(spec, "ray"), "annotations": variant_annotations(spec)}
    return {
        "groupName": "gateway",
        "replicas": GATEWAY_REPLICAS,
        "minReplicas": GATEWAY_REPLICAS,
        "maxReplicas": GATEWAY_REPLICAS,
        "numOfHosts": 1,
        "rayStartParams": {},
        "template": {"metadata": metadata, "spec": {"containers": [container]}},
    }


def _engine_group(spec: VariantSpec) -> dict[str, Any]:
    worker = {
        "name": "ray-worker",
        "image": ray_image(spec.vendor),
        "env": pods.hub_env(spec),
        "resources": pods.resources(spec),
        "volumeMounts": pods.volume_mounts(),
    }
    scaling = spec.autoscaling
    return {
        "groupName": "engine",
        "replicas": spec.replicas,
        "minReplicas": scaling.min_replicas if scaling else spec.replicas,
        "maxReplicas": scaling.max_replicas if scaling else spec.replicas,
        "numOfHosts": 1,
        "rayStartParams": _worker_start_params(spec),
        "template": _ray_pod(spec, worker, worker=True),
    }


def ray_service(spec: VariantSpec) -> dict[str, Any]:
    head = {
        "name": "ray-head",
        "image": ray_image("cpu"),
        "ports": [
            {"name": "gcs", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265},
            {"name": "client", "containerPort": 10001}, {"name": "serve", "containerPort": HTTP_PORT},
        ],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
        "volumeMounts": [{"name": "models", "mountPath": MODELS_MOUNT}],
    }  # fmt: skip
    groups = [_gateway_group(spec)]
    cluster: dict[str, Any] = {"rayVersion": RAY_VERSION}
    if engine_in_ray(spec):
        groups.append(_engine_group(spec))
        if spec.autoscaling is not None:
            cluster["enableInTreeAutoscaling"] = True
    cluster["headGroupSpec"] = {
        "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
        "template": _ray_pod(spec, head, worker=False),
    }
    cluster["workerGroupSpecs"] = groups
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": object_metadata(spec, f"{spec.name}-ray", "ray"),
        "spec": {"serveConfigV2": to_yaml(serve_config(spec, container=True)), "rayClusterConfig": cluster},
    }


# KubeRay's MaxRayServiceNameLength (53 - 6: it appends 6 to name the RayCluster, whose Services
# must stay DNS labels) less this render's "-ray" suffix on the RayService.
K8S_NAME_MAX = 47 - len("-ray")


def render_k8s(spec: VariantSpec) -> dict[str, str | bytes]:
    """``k8s/*.yaml`` for ``spec`` (any engine); a name KubeRay would refuse is a ``RenderError``
    (only here: the other targets, and a gateway's ``specs:``, take any spec name, a DNS label of
    up to 63 characters)."""
    if len(spec.name) > K8S_NAME_MAX:
        from deploy.render import RenderError

        raise RenderError(
            f"name: {len(spec.name)} characters, at most {K8S_NAME_MAX} for the k8s target: its objects "
            f"are named after it and KubeRay refuses the RayService {spec.name}-ray (over 47 characters)"
        )
    files: dict[str, str | bytes] = {
        "k8s/deployment.yaml": header(spec) + yaml_documents([deployment(spec)]),
        "k8s/service.yaml": header(spec) + yaml_documents([service(spec)]),
        "k8s/rayservice.yaml": header(spec) + yaml_documents([ray_service(spec)]),
    }
    if spec.engine == "trtllm":
        files["k8s/configmap.yaml"] = header(spec) + yaml_documents([config_map(spec)])
    if spec.engine == EMBEDDED_ENGINE:
        files["k8s/configmap.yaml"] = header(spec) + yaml_documents([gateway_config_map(spec)])
    scaling, monitor = scaled_object(spec), pod_monitor(spec)
    if scaling is not None and monitor is not None:
        files["k8s/scaledobject.yaml"] = header(spec) + yaml_documents([scaling])
        files["k8s/podmonitor.yaml"] = header(spec) + yaml_documents([monitor])
    return files
