"""argparse value types shared by the ``turnout`` commands (off the request path).

They turn a bad command-line value into argparse's usage error (exit 2, the option named)
before anything starts, instead of a server that binds somewhere else or a traceback.
"""

from __future__ import annotations

import argparse
import re
from typing import Literal, get_args

# uvicorn's log levels: --log-level's choices and the config file's server.log_level.
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)


def tcp_port(text: str) -> int:
    """A TCP port, 0–65535 (0: any free port, where the server allows it)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0-65535")
    return port


_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}")


def key_name_problem(text: str) -> str | None:
    """Why ``text`` cannot name an API key (the CLI's and the admin API's words), or None."""
    if _KEY_NAME.fullmatch(text):
        return None
    return (
        f"{text!r} is not a key name: use 1-64 letters, digits and . _ @ : -, starting with a letter or digit"
    )


def key_name(text: str) -> str:
    """An API key's name: 1-64 letters, digits and ``._@:-``, starting with a letter or digit.

    It is shown in tables, the audit log and the ``key`` label of rate-limit metrics, so an
    empty name, spaces or control characters are refused when the key is made.
    """
    problem = key_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text
