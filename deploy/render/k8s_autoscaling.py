"""Kubernetes autoscaling for an engine Deployment: a KEDA ``ScaledObject`` (``k8s/scaledobject.yaml``)
and the ``PodMonitor`` (``k8s/podmonitor.yaml``) that scrapes what it reads.

Off the request path (``turnout deploy render --target k8s``). A spec's ``autoscaling``
(``min_replicas``, ``max_replicas``, ``target_ongoing_requests`` per replica, Ray Serve's terms)
becomes, for a vLLM Deployment, KEDA's Prometheus scaler on the requests vLLM is running plus
those waiting (``vllm:num_requests_running`` + ``vllm:num_requests_waiting`` of the served model
name, from this Deployment's pods only), with ``target_ongoing_requests`` as the per-replica
threshold: KEDA's HPA keeps
ceil(ongoing / target) replicas within the bounds. KEDA rather than a bare HPA because the
query is in the object (no Prometheus adapter rules to keep in step) and it can scale to zero:
with ``min_replicas: 0`` a second trigger wakes the Deployment when requests for the variant
reach the Turnout gateways (``turnout_requests_total`` by the spec's variant id), since an engine
with no pod reports nothing. Needs KEDA and the Prometheus Operator; ``PROMETHEUS`` is where
KEDA asks (edit it for your cluster).

The model name alone does not say whose load it is: two variants of one model (an A/B of the
same weights on two accelerators, a canary) serve the same name, and each would scale on the
sum of both. So the PodMonitor (selecting the Deployment's pods by their stable name and
component labels) copies the pods' name label (and their variant id, for dashboards) onto every
series it scrapes (``podTargetLabels``), and the query keeps this Deployment's: by name, not by
variant id, so while an edited spec rolls out the old pods, still serving, are counted too (by
id, the query saw only the new pods, ~0 until ready, and could scale the Deployment down in the
middle of a rollout). The
Prometheus must select the PodMonitor (kube-prometheus-stack's default ``podMonitorSelector``
wants its ``release`` label: add it); with ``min_replicas`` of 1 or more, the trigger refuses empty results
(``ignoreNullValues: false``), so a PodMonitor nobody scrapes shows as a KEDA error, not as a
variant that never scales.

Other engines' Deployments keep a fixed ``replicas`` here: their load metrics differ by backend
and version; under Ray (the embedded engine) the RayService autoscales the engine group.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.render.common import NAME_LABEL, VARIANT_LABEL, object_metadata, selector_labels
from deploy.spec import VariantSpec

PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
POLLING_INTERVAL_S = 15
COOLDOWN_S = 300  # before scaling to zero: a model load takes minutes
# Activation only: a threshold no request rate reaches, so this trigger asks for one replica
# whenever requests arrive and never for more (the ongoing-requests trigger sizes the rest).
_WAKE_THRESHOLD = "1000000"


# The label the Prometheus Operator gives a pod label it copies onto scraped series: characters
# a label name cannot hold become "_".
def _scraped(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label)


SCRAPED_NAME_LABEL = _scraped(NAME_LABEL)


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
    # json.dumps: PromQL string literals
    served = f"{{model_name={json.dumps(spec.served_name)},{SCRAPED_NAME_LABEL}={json.dumps(spec.name)}}}"
    ongoing = f"sum(vllm:num_requests_running{served}) + sum(vllm:num_requests_waiting{served})"
    triggers = [_prometheus(ongoing, f"{scaling.target_ongoing_requests:g}")]
    if scaling.min_replicas >= 1:
        # Pods always run, so no series means no scraping (a PodMonitor the Prometheus does not
        # select): KEDA reports an error instead of reading 0 and holding the minimum in silence.
        triggers[0]["metadata"]["ignoreNullValues"] = "false"
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


def pod_monitor(spec: VariantSpec) -> dict[str, Any] | None:
    """The PodMonitor that scrapes ``spec``'s engine pods for its ScaledObject, or None (none)."""
    if scaled_object(spec) is None:
        return None
    scrape = {"port": "http", "path": "/metrics", "interval": f"{POLLING_INTERVAL_S}s"}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": object_metadata(spec, spec.name, "engine"),
        "spec": {
            "selector": {"matchLabels": selector_labels(spec, "engine")},
            "podMetricsEndpoints": [scrape],
            "podTargetLabels": [NAME_LABEL, VARIANT_LABEL],
        },
    }
