"""What every handler reads from ``app.state.turnout``: the gateway, the store, access control."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serving.access import Access
from serving.canary_controller import CanaryController
from serving.gateway import Gateway
from serving.metrics import GatewayMetrics
from serving.route_sync import RouteSync
from serving.shadow_recorder import ShadowRecorder
from serving.store import RouteStore

if TYPE_CHECKING:  # it reads this module's AppState
    from serving.api.background_responses import BackgroundRuns
    from serving.batch_runner import BatchRunner


@dataclass(slots=True)
class AppState:
    gateway: Gateway
    metrics: GatewayMetrics
    max_body_bytes: int
    started: int
    access: Access
    store: RouteStore
    sync: RouteSync
    shadow_recorder: ShadowRecorder
    background: BackgroundRuns
    batches: BatchRunner
    canary: CanaryController | None = None
    # Spec name → variant id of spec-declared variants: admin writes may name them either way.
    variant_aliases: dict[str, str] = field(default_factory=dict)
    # Under Ray Serve: this replica's /metrics page → the page for every gateway replica
    # (``serving.ray_app``); None: the page as it is.
    metrics_page: Callable[[bytes], Awaitable[bytes]] | None = None
    # Under Ray Serve: this replica's shadow record (``ShadowRecorder.state`` and its copies in
    # flight) → every live gateway replica's, for one comparison over all (``serving.shadow_merge``);
    # None: this gateway's alone.
    shadow_states: Callable[[dict[str, Any]], Awaitable[dict[str, dict[str, Any]]]] | None = None
