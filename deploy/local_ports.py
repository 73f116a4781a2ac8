"""Is a local TCP port free? Asked before ``turnout backends up`` starts an engine server and
before ``turnout serve --ray`` starts Ray.

Without it, a server started on a port another process holds answered the readiness probe
through that other process (``/health`` 200 within 0.0 s) before failing on its own bind:
the command said "ready" for someone else's server, then exited.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable


def taken(ports: Iterable[int], host: str = "127.0.0.1") -> list[int]:
    """The ports of ``ports`` that cannot be bound on ``host`` now (in use, or not allowed)."""
    busy = []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # `--host ::` binds IPv6
    for port in ports:
        with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as probe:
            # As servers bind: a port whose old connections linger in TIME_WAIT is free for them
            # (without it a just-stopped server's port read as taken); a listener still refuses.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                busy.append(port)
    return busy


def refuse_taken(ports: Iterable[int], what: str, host: str = "127.0.0.1") -> str | None:
    """Why ``what`` cannot start on ``ports`` of ``host`` (one given twice, or some taken), or None
    when all are free."""
    ports = list(ports)
    twice = sorted({port for port in ports if ports.count(port) > 1 and port != 0})
    if twice:
        listed = ", ".join(str(port) for port in twice)
        return f"cannot start {what}: port {listed} is given for two of its listeners; give each its own"
    busy = taken(ports, host)
    if not busy:
        return None
    listed = ", ".join(str(port) for port in busy)
    return f"cannot start {what}: port {listed} on {host} is already in use (another server?); choose others"
