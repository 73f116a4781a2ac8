"""argparse value types shared by the ``turnout`` commands (off the request path).

They turn a bad command-line value into argparse's usage error (exit 2, the option named)
before anything starts, instead of a server that binds somewhere else or a traceback.
"""

from __future__ import annotations

import argparse


def tcp_port(text: str) -> int:
    """A TCP port, 0–65535 (0: any free port, where the server allows it)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port
