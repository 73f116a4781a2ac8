"""Ray Serve config and Kubernetes manifests: replicas, autoscaling, devices, TPU selectors, labels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.render import RenderError, render
from deploy.render.k8s import K8S_NAME_MAX, ray_service
from deploy.render.ray_serve import actor_options, serve_config
from deploy.spec import AutoscalingSpec, VariantSpec, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "deploy" / "examples"
SPECS = REPO / "tests" / "golden" / "render" / "_specs"


def ray_config(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(render(load_spec(path), "ray")["ray/serve_config.yaml"])
    return loaded


def k8s(path: Path) -> dict[str, Any]:
    files = render(load_spec(path), "k8s")
    return {
        name.split("/")[1].removesuffix(".yaml"): yaml.safe_load(content) for name, content in files.items()
    }


def deployments(config: dict[str, Any]) -> dict[str, Any]:
    return {d["name"]: d for d in config["applications"][0]["deployments"]}


def test_ray_gpu_engines_run_as_their_own_servers() -> None:
    config = ray_config(EXAMPLES / "llama3-70b-mi300x-tp2.yaml")
    app = config["applications"][0]
    assert app["import_path"] == "serving.ray_app:build_app"
    assert app["args"]["variant_id"] == load_spec(EXAMPLES / "llama3-70b-mi300x-tp2.yaml").id
    assert app["args"]["engine_url"] == "http://llama3-70b-mi300x-tp2:8000/v1"  # the rendered Service
    assert set(deployments(config)) == {"TurnoutGateway", "TurnoutRateCounter"}
    assert deployments(config)["TurnoutGateway"]["num_replicas"] == app["args"]["gateway_replicas"] == 2
    assert config["http_options"] == {"host": "0.0.0.0", "port": 8000}


def _autoscaled_tiny() -> VariantSpec:
    scaling = AutoscalingSpec(min_replicas=1, max_replicas=4, target_ongoing_requests=8)
    return load_spec(EXAMPLES / "tiny-cpu.yaml").model_copy(update={"replicas": 2, "autoscaling": scaling})


def test_ray_embedded_engine_replicas_and_autoscaling_from_the_spec() -> None:
    fixed = deployments(ray_config(EXAMPLES / "tiny-cpu.yaml"))["TurnoutEngine"]
    assert fixed["num_replicas"] == 1 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 4} and fixed["max_ongoing_requests"] == 16
    engine = next(d for d in serve_config(_autoscaled_tiny())["applications"][0]["deployments"]
                  if d["name"] == "TurnoutEngine")  # fmt: skip
    assert engine["autoscaling_config"] == {
        "min_replicas": 1, "initial_replicas": 2, "max_replicas": 4, "target_ongoing_requests": 8.0,
    }  # fmt: skip
    assert "num_replicas" not in engine


def test_ray_engine_actor_options_per_vendor() -> None:
    tpu = {"num_cpus": 4, "resources": {"TPU": 4}}
    assert actor_options(load_spec(EXAMPLES / "llama3-8b-tpu-v5e.yaml")) == tpu
    assert actor_options(load_spec(EXAMPLES / "llama3-70b-mi300x-tp2.yaml")) == {"num_cpus": 2, "num_gpus": 2}
    assert actor_options(load_spec(EXAMPLES / "tiny-cpu.yaml")) == {"num_cpus": 4}


def test_ray_args_carry_the_spec_as_written() -> None:
    args = ray_config(EXAMPLES / "tiny-cpu.yaml")["applications"][0]["args"]
    assert args["variant"]["model"]["path"] == "../model/artifacts/turnout-tiny/hf"
    assert args["model_source"].endswith("deploy/model/artifacts/turnout-tiny/hf")


def test_deployment_devices_and_labels() -> None:
    objects = k8s(EXAMPLES / "llama3-70b-h100-tp4.yaml")
    spec = load_spec(EXAMPLES / "llama3-70b-h100-tp4.yaml")
    deployment = objects["deployment"]
    for obj in objects.values():
        assert obj["metadata"]["labels"]["turnout.dev/variant-id"] == spec.id
        assert obj["metadata"]["annotations"]["turnout.dev/variant-id"] == spec.id
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["turnout.dev/variant-id"] == spec.id
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["command"] == ["trtllm-serve"]
    assert "/etc/turnout/extra_llm_api_options.yaml" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "nodeSelector" not in pod["spec"]
    assert "extra_llm_api_options.yaml" in objects["configmap"]["data"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert objects["service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_tpu_selectors_and_resource() -> None:
    objects = k8s(EXAMPLES / "llama3-8b-tpu-v5e.yaml")
    pod = objects["deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["containers"][0]["resources"]["requests"]["google.com/tpu"] == "4"
    groups = objects["rayservice"]["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["gateway"]  # the TPUs are the engine Deployment's


def test_rayservice_embeds_the_serve_config_and_scales() -> None:
    objects = k8s(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    service = objects["rayservice"]
    assert service["apiVersion"] == "ray.io/v1" and service["kind"] == "RayService"
    embedded = yaml.safe_load(service["spec"]["serveConfigV2"])
    assert embedded["applications"][0]["import_path"] == "serving.ray_app:build_app"
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (gateway,) = cluster["workerGroupSpecs"]  # vLLM runs from the Deployment, reached by its Service
    assert (gateway["groupName"], gateway["replicas"]) == ("gateway", 2)
    (env,) = gateway["template"]["spec"]["containers"][0]["env"]
    assert env["name"] == "TURNOUT_STORE_URL" and env["valueFrom"]["secretKeyRef"]["name"] == "turnout-store"
    assert "enableInTreeAutoscaling" not in cluster
    scaled = ray_service(_autoscaled_tiny())["spec"]["rayClusterConfig"]
    engine = scaled["workerGroupSpecs"][1]
    assert (engine["groupName"], engine["replicas"], engine["minReplicas"], engine["maxReplicas"]) == (
        "engine", 2, 1, 4,
    )  # fmt: skip
    assert scaled["enableInTreeAutoscaling"] is True


def test_engines_without_devices_or_with_triton() -> None:
    cpu = k8s(EXAMPLES / "tiny-cpu.yaml")["deployment"]["spec"]["template"]["spec"]
    container = cpu["containers"][0]
    assert container["command"] == ["turnout"] and container["args"][0] == "serve"
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert "tolerations" not in cpu and "nodeSelector" not in cpu
    triton = k8s(SPECS / "llama3-8b-triton-trtllm-h100.yaml")
    container = triton["deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["/models/llama3-8b-triton-trtllm/triton/run.sh"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert [p["name"] for p in triton["service"]["spec"]["ports"]] == ["http", "grpc", "metrics"]


def test_selectors_survive_a_spec_edit_and_select_only_engine_pods() -> None:
    # apps/v1 Deployment selectors are immutable: an edited spec (new id) must keep the selector,
    # or `kubectl apply` fails with "field is immutable". The new id still rolls the pods.
    spec = load_spec(REPO / "tests" / "golden" / "render" / "_specs" / "qwen-v6e-autoscale.yaml")
    edited = spec.model_copy(update={"batching": spec.batching.model_copy(update={"max_num_seqs": 7})})
    assert edited.id != spec.id
    before, after = (render(s, "k8s") for s in (spec, edited))
    objs = [
        {name.split("/")[1].removesuffix(".yaml"): yaml.safe_load(text) for name, text in files.items()}
        for files in (before, after)
    ]
    old, new = objs
    assert old["deployment"]["spec"]["selector"] == new["deployment"]["spec"]["selector"]
    assert old["service"]["spec"]["selector"] == new["service"]["spec"]["selector"]
    assert old["podmonitor"]["spec"]["selector"] == new["podmonitor"]["spec"]["selector"]
    template = new["deployment"]["spec"]["template"]["metadata"]
    assert template["labels"]["turnout.dev/variant-id"] == edited.id  # a changed template rolls
    assert template["annotations"]["turnout.dev/variant-id"] == edited.id
    pod_labels = template["labels"].items()
    assert new["deployment"]["spec"]["selector"]["matchLabels"].items() <= pod_labels
    assert new["service"]["spec"]["selector"].items() <= pod_labels
    assert new["podmonitor"]["spec"]["selector"]["matchLabels"].items() <= pod_labels
    assert new["podmonitor"]["spec"]["podTargetLabels"] == [
        "app.kubernetes.io/name",
        "turnout.dev/variant-id",
    ]
    # The ScaledObject reads the Deployment's load by its stable name: the same query before and
    # after the edit, so the old pods, still serving during the rollout, count.
    assert old["scaledobject"]["spec"]["triggers"][0] == new["scaledobject"]["spec"]["triggers"][0]
    ray = new["rayservice"]["spec"]["rayClusterConfig"]
    for ray_pod in [ray["headGroupSpec"]["template"], *(g["template"] for g in ray["workerGroupSpecs"])]:
        assert not new["service"]["spec"]["selector"].items() <= ray_pod["metadata"]["labels"].items()


def _dns1035_label(name: str) -> bool:
    return len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None


@pytest.mark.parametrize(
    "path", [EXAMPLES / "llama3-70b-h100-tp4.yaml", SPECS / "qwen-v6e-autoscale.yaml"], ids=lambda p: p.stem
)
def test_the_longest_name_the_k8s_render_takes_makes_names_kubernetes_and_kuberay_accept(path: Path) -> None:
    spec = load_spec(path).model_copy(update={"name": "n" * K8S_NAME_MAX})
    for text in render(spec, "k8s").values():
        obj = yaml.safe_load(text)
        name = obj["metadata"]["name"]
        if obj["kind"] == "RayService":
            assert len(name) <= 47  # KubeRay's MaxRayServiceNameLength (53 - 6)
        assert _dns1035_label(name), (obj["kind"], name)  # Services' rule; the strictest of the others'
        assert all(len(value) <= 63 for value in obj["metadata"]["labels"].values())


def test_a_name_too_long_for_a_rayservice_is_refused_by_the_k8s_render_only() -> None:
    """Once a spec error, which stopped a gateway whose specs: named such a spec from starting."""
    base = load_spec(EXAMPLES / "llama3-70b-h100-tp4.yaml").model_dump(mode="json")
    spec = parse_spec({**base, "name": "n" * (K8S_NAME_MAX + 1)}, "long.yaml")  # a valid spec
    with pytest.raises(RenderError) as caught:
        render(spec, "k8s")
    assert "name: 44 characters, at most 43 for the k8s target" in str(caught.value)
    assert "RayService" in str(caught.value)
    assert render(spec, "ray")  # the other targets take it
