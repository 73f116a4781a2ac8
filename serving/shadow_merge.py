"""The shadow comparison an operator reads, from one gateway's record or every replica's (pure).

Off the request path: ``GET /admin/routes/{name}/shadow`` (``serving.api.admin_routes``) turns
the recorded states (``serving.shadow_recorder.ShadowRecorder.state``) into the summary it
answers with. A plain gateway has one state, :data:`LOCAL`. Under ``turnout serve --ray`` every
gateway replica mirrors the requests it serves and records their comparisons itself, so the
replica a call reaches merges every live replica's state (``serving.ray_app`` collects them
through the counter deployment): counts and sums add up, the latency deltas are pooled before
the median is taken, and the recent differences are the newest of all, each naming its
``gateway_replica``. Before, the answer summarised only the copies of the replica that answered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from serving.shadow_recorder import ShadowTally

LOCAL = ""  # the state of a gateway that is not one replica of several


def shadow_summary(route: str, states: Mapping[str, Mapping[str, Any]], recent_cap: int) -> dict[str, Any]:
    """``route``'s comparison over ``states`` (gateway replica → its recorded state, with the
    copies it had ``in_flight``): per shadow its counts and figures, then the ``recent_cap``
    newest differences, newest first. Several replicas' (or one not :data:`LOCAL`) also name
    each difference's replica and say what each replica sent and compared."""
    replicas_named = set(states) != {LOCAL}
    shadows: dict[str, ShadowTally] = {}
    recent: list[dict[str, Any]] = []
    per_replica: dict[str, dict[str, int]] = {}
    in_flight = 0
    for replica, state in sorted(states.items()):
        tallies: Mapping[str, Mapping[str, Any]] = state.get("tallies", {}).get(route, {})
        for shadow, tally in tallies.items():
            merged = shadows.get(shadow)
            if merged is None:
                merged = shadows[shadow] = ShadowTally(latency_deltas=deque())  # every replica's
            merged.add(dict(tally))
        for difference in reversed(state.get("recent", {}).get(route, ())):
            recent.append({**difference, "gateway_replica": replica} if replicas_named else dict(difference))
        in_flight += int(state.get("in_flight", 0))
        per_replica[replica] = {
            "sent": sum(int(t.get("sent", 0)) for t in tallies.values()),
            "compared": sum(int(t.get("compared", 0)) for t in tallies.values()),
        }
    recent.sort(key=lambda difference: float(difference["at"]), reverse=True)  # ties stay newest first
    summary: dict[str, Any] = {
        "route": route,
        "shadows": {shadow: tally.as_dict() for shadow, tally in shadows.items()},
        "recent_differences": recent[:recent_cap],
        "in_flight": in_flight,
    }
    if replicas_named:
        summary["gateway_replicas"] = per_replica
    return summary
