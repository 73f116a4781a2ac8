"""What every handler reads from ``app.state.turnout``: the gateway and edge limits."""

from __future__ import annotations

from dataclasses import dataclass

from serving.gateway import Gateway
from serving.metrics import GatewayMetrics


@dataclass(slots=True)
class AppState:
    gateway: Gateway
    metrics: GatewayMetrics
    max_body_bytes: int
    started: int
