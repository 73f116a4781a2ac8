"""``turnout eval`` / ``turnout compare``: argparse wiring (placeholder until the runners land)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    commands.add_parser("eval", help="measure accuracy through the API (not built yet)")
    commands.add_parser("compare", help="join load and eval runs into one report (not built yet)")


def run(args: argparse.Namespace) -> int:
    print(f"turnout: {args.command} is not built yet")
    return 2
