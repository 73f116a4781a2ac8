"""``turnout loadtest``: argparse wiring for the locust runner (placeholder until the runner lands)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    commands.add_parser("loadtest", help="load-test a gateway with locust (not built yet)")


def run(args: argparse.Namespace) -> int:
    print("turnout: loadtest is not built yet")
    return 2
