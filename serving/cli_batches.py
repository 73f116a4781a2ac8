"""``turnout batches …``: every key's Batch API batches on a running gateway, and a cancel.

Off the request path: an operator's HTTP client of ``/admin/batches`` (``serving.api.admin_batches``)
through :class:`serving.cli_routes.AdminClient`, with the same ``--url``, ``--token`` and
``--json`` as ``turnout routes``. ``list`` needs a viewer token, ``cancel`` an operator's; the
cancel is audited (``turnout routes audit``). Exit status: 0 ok, 1 when the API refuses or
cannot be reached, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from serving.batches import STATUSES
from serving.cli_routes import ApiError, common_options, open_client, say_api_error
from serving.cli_routes_pure import format_time, render_table

if TYPE_CHECKING:
    import httpx


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``batches`` and its sub-commands to the ``turnout`` parser."""
    group = commands.add_parser(
        "batches", help="every key's Batch API batches on a running gateway (admin API)"
    )
    common_options(group, defaults=True)
    sub = group.add_subparsers(dest="batches_command", required=True)
    listing = sub.add_parser("list", help="batches, newest first: key, status, requests done")
    common_options(listing, defaults=False)
    listing.add_argument("--status", choices=STATUSES, help="only batches in this status")
    listing.add_argument("--limit", type=int, default=20, help="at most this many, 1 to 100 (default 20)")
    cancel = sub.add_parser("cancel", help="cancel any key's batch (audited)")
    common_options(cancel, defaults=False)
    cancel.add_argument("batch_id", help="the batch (batch_…)")


def batches_table(batches: Sequence[dict[str, Any]]) -> str:
    """Batches as ``turnout batches list`` prints them (a revoked key's show as "(revoked)")."""
    rows = []
    for batch in batches:
        counts = batch.get("request_counts") or {}
        rows.append(
            [
                str(batch["id"]),
                str(batch.get("key") or "(revoked)"),
                str(batch["status"]),
                f"{counts.get('completed', 0)}/{counts.get('failed', 0)}/{counts.get('total', 0)}",
                str(batch.get("endpoint") or "-"),
                str(batch.get("model") or "-"),
                format_time(batch.get("created_at")),
            ]
        )
    headers = ["id", "key", "status", "done/failed/total", "endpoint", "model", "created"]
    return render_table(headers, rows)


def run(args: argparse.Namespace, *, transport: httpx.BaseTransport | None = None) -> int:
    """Run one ``turnout batches`` command (``transport`` lets tests answer without a server)."""
    if args.batches_command == "list" and not 1 <= args.limit <= 100:
        print("turnout: --limit must be from 1 to 100", file=sys.stderr)
        return 2
    client = open_client(args, transport)
    if client is None:
        return 2
    try:
        if args.batches_command == "list":
            params = {"limit": str(args.limit), **({"status": args.status} if args.status else {})}
            answer = client.call("GET", "/admin/batches", params=params)
            print(json.dumps(answer, indent=2) if args.json else batches_table(answer["data"]))
            if not args.json and answer.get("has_more"):
                print(f"(more: raise --limit, or page with GET /admin/batches?after={answer['last_id']})")
        else:
            answer = client.call("POST", f"/admin/batches/{quote(args.batch_id, safe='')}/cancel")
            print(json.dumps(answer, indent=2) if args.json else f"{answer['id']}: {answer['status']}")
        return 0
    except ApiError as exc:
        say_api_error(exc)
        return 1
    finally:
        client.close()
