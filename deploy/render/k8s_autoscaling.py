"""Kubernetes autoscaling for an engine Deployment: a KEDA ``ScaledObject`` (``k8s/scaledobject.yaml``).

Off the request path (``turnout deploy render --target k8s``). A spec's ``autoscaling``
(``min_replicas``, ``max_replicas``, ``target_ongoing_requests`` per replica, Ray Serve's terms)
becomes, for a vLLM Deployment, KEDA's Prometheus scaler on the requests vLLM is running plus
those waiting (``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` of the served model
name), with ``target_ongoing_requests`` as the per-replica threshold: KEDA's HPA keeps
ceil(ongoing / target) replicas within the bounds. KEDA rather than a bare HPA because the
query is in the object (no Prometheus adapter rules to keep in step) and it can scale to zero:
with ``min_replicas: 0`` a second trigger wakes the Deployment when requests for the variant
reach the Turnout gateways (``turnout_requests_total`` by the spec's variant id), since an engine
with no pod reports nothing. Needs KEDA and a Prometheus scraping the pods; ``PROMETHEUS`` is
where KEDA asks (edit it for your cluster).

Other engines' Deployments keep a fixed ``replicas`` here: their load metrics differ by backend
and version; under Ray (the embedded engine) the RayService autoscales the engine group.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.render.common import object_metadata
from deploy.spec import VariantSpec

PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
POLLING_INTERVAL_S = 15
COOLDOWN_S = 300  # before scaling to zero: a model load takes minutes
# Activation only: a threshold no request rate reaches, so this trigger asks for one replica
# whenever requests arrive and never for more (the ongoing-requests trigger sizes the rest).
_WAKE_THRESHOLD = "1000000"


def _prometheus(query: str, threshold: str, activation: str | None = None) -> dict[str, Any]:
    metadata = {"serverAddress": PROMETHEUS, "query": query, "threshold": threshold}
    if activation is not None:
        metadata["activationThreshold"] = activation
    return {"type": "prometheus", "metadata": metadata}


def scaled_object(spec: VariantSpec) -> dict[str, Any] | None:
    """The ScaledObject for ``spec``'s Deployment, or None (no autoscaling, or not vLLM)."""
    scaling = spec.autoscaling
    if scaling is None or spec.engine != "vllm":
        return None
    served = "{model_name=" + json.dumps(spec.served_name) + "}"  # a PromQL string literal
    ongoing = f"sum(vllm:num_requests_running{served}) + sum(vllm:num_requests_waiting{served})"
    triggers = [_prometheus(ongoing, f"{scaling.target_ongoing_requests:g}")]
    if scaling.min_replicas == 0:
        arriving = f'sum(rate(turnout_requests_total{{variant="{spec.id}"}}[2m]))'
        triggers.append(_prometheus(arriving, _WAKE_THRESHOLD, activation="0"))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": object_metadata(spec, spec.name, "engine"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": POLLING_INTERVAL_S,
            "cooldownPeriod": COOLDOWN_S,
            "triggers": triggers,
        },
    }
