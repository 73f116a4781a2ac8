"""deploy.render.k8s_autoscaling: which specs get a KEDA ScaledObject, and its query and bounds."""

from __future__ import annotations

from pathlib import Path

from deploy.render.k8s_autoscaling import pod_monitor, scaled_object
from deploy.spec import load_spec

GOLDEN_SPECS = Path(__file__).resolve().parents[1] / "golden" / "render" / "_specs"
EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_an_autoscaled_vllm_spec_scales_on_ongoing_requests_per_replica() -> None:
    spec = load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    assert spec.autoscaling is not None
    scaling = scaled_object(spec)
    assert scaling is not None
    (trigger,) = scaling["spec"]["triggers"]  # min_replicas >= 1: no wake-up trigger
    assert trigger["metadata"]["threshold"] == f"{spec.autoscaling.target_ongoing_requests:g}"
    query = trigger["metadata"]["query"]
    assert "vllm:num_requests_running{model_name=" in query and "vllm:num_requests_waiting" in query
    assert trigger["metadata"]["ignoreNullValues"] == "false"  # pods run: no series = no scraping


def test_two_variants_of_one_model_scale_on_their_own_pods_alone() -> None:
    a = load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    b = a.model_copy(update={"name": "llama3-8b-canary", "replicas": 1})
    assert a.served_name == b.served_name and a.id != b.id
    for spec in (a, b):
        scaling, monitor = scaled_object(spec), pod_monitor(spec)
        assert scaling is not None and monitor is not None
        query = scaling["spec"]["triggers"][0]["metadata"]["query"]
        # By the Deployment's stable name, not the variant id: during a rollout of an edited
        # spec the old pods (old id) still serve, and their load counts.
        assert query.count(f'app_kubernetes_io_name="{spec.name}"') == 2  # running and waiting
        assert "variant_id" not in query
        assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == spec.name
        assert monitor["spec"]["podTargetLabels"] == ["app.kubernetes.io/name", "turnout.dev/variant-id"]


def test_scaling_to_zero_wakes_on_requests_for_the_variant() -> None:
    spec = load_spec(GOLDEN_SPECS / "qwen-v6e-autoscale.yaml")
    scaling = scaled_object(spec)
    assert scaling is not None and scaling["spec"]["minReplicaCount"] == 0
    assert "ignoreNullValues" not in scaling["spec"]["triggers"][0]["metadata"]  # none at zero pods
    wake = scaling["spec"]["triggers"][1]["metadata"]
    assert f'variant="{spec.id}"' in wake["query"] and wake["activationThreshold"] == "0"


def test_no_scaled_object_without_autoscaling_or_for_other_engines() -> None:
    vllm = load_spec(EXAMPLES / "llama3-8b-h100-fp8kv.yaml")
    assert scaled_object(vllm.model_copy(update={"autoscaling": None})) is None
    triton = load_spec(GOLDEN_SPECS / "llama3-8b-triton-vllm-a100.yaml")
    assert scaled_object(triton.model_copy(update={"autoscaling": vllm.autoscaling})) is None
    assert pod_monitor(vllm.model_copy(update={"autoscaling": None})) is None
