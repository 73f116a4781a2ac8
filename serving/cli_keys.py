"""``turnout keys create|list|revoke``: manage API keys and admin tokens in the store.

Off the request path: an operator's command that writes straight to the route store
(``serving.store``), the same database the gateways poll; a running gateway picks a new
or revoked key up on its next poll and rebuilds its ``serving.auth.KeyRing``. Only the
key's SHA-256 is stored: ``create`` prints the key once (alone on stdout, so scripts can
capture it) and it cannot be shown again.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.auth import ROLES
from serving.cli_types import key_name
from serving.errors import ConfigError, TurnoutError

if TYPE_CHECKING:
    from serving.store import ApiKeyRecord, RouteStore


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``keys`` and its sub-commands to the ``turnout`` parser."""
    keys = commands.add_parser("keys", help="create, list and revoke API keys (works on the store)")
    _where(keys, defaults=True)
    sub = keys.add_subparsers(dest="keys_command", required=True)
    create = sub.add_parser("create", help="make a key and print it (once)")
    create.add_argument("name", type=key_name, help="a unique name for the key (letters, digits, ._@:-)")
    roles = "client (default), viewer, operator, admin"
    create.add_argument("--role", choices=ROLES, default="client", help=roles)
    create.add_argument("--rpm", type=_positive_int, help="requests per minute (default: unlimited)")
    create.add_argument("--tpm", type=_positive_int, help="tokens per minute (default: unlimited)")
    listing = sub.add_parser("list", help="the keys (names, roles, prefixes; never the keys)")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = sub.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    for parser in (create, listing, revoke):
        _where(parser, defaults=False)


def _where(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # On the group and on every sub-command, so the options may come before or after the command.
    default: Any = None if defaults else argparse.SUPPRESS
    parser.add_argument("--store", default=default, help="store URL (default: --config's, else the default)")
    parser.add_argument("--config", default=default, help="gateway.yaml whose store.url to use")


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else ``--config``'s store.url, else ``$TURNOUT_STORE_URL`` or the SQLite default."""
    from serving.config import default_store_url, load_config

    if getattr(args, "store", None):
        return str(args.store)
    if getattr(args, "config", None):
        return load_config(Path(args.config)).store.url
    return default_store_url()


def keys_table(records: list[ApiKeyRecord], *, with_revoked: bool = False) -> str:
    from serving.cli_routes_pure import format_time, render_table

    headers = ["name", "role", "prefix", "created", "rpm", "tpm"]
    if with_revoked:
        headers.append("revoked")
    rows = []
    for record in records:
        row = [record.name, record.role, record.prefix + "…", format_time(record.created_at)]
        row += [
            "-" if record.rpm is None else str(record.rpm),
            "-" if record.tpm is None else str(record.tpm),
        ]
        if with_revoked:
            row.append(format_time(record.revoked_at))
        rows.append(row)
    return render_table(headers, rows)


def _execute(store: RouteStore, args: argparse.Namespace) -> int:
    actor = f"cli:{getpass.getuser()}"
    if args.keys_command == "create":
        key, record = store.issue_key(name=args.name, role=args.role, rpm=args.rpm, tpm=args.tpm, actor=actor)
        print(key)
        print(
            f"created {record.role} key '{record.name}'. This is the only time the key is shown: "
            "Turnout stores only its hash, so keep it now.",
            file=sys.stderr,
        )
        return 0
    if args.keys_command == "list":
        records = store.keys(include_revoked=args.all)
        if args.json:
            print(json.dumps([record.as_dict() for record in records], indent=2))
        elif records:
            print(keys_table(records, with_revoked=args.all))
        else:
            print("no keys", file=sys.stderr)
        return 0
    record = store.revoke_key(args.name, actor=actor)
    print(f"revoked key '{record.name}' ({record.role}, {record.prefix}…)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one ``turnout keys`` command; 0 ok, 1 on a store error (name taken, no such key), 2 on config."""
    try:
        url = store_url(args)
    except ConfigError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    from serving.store import RouteStore

    try:
        store = RouteStore(url)
    except ConfigError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    try:
        return _execute(store, args)
    except TurnoutError as exc:
        print(f"turnout: {exc.message}", file=sys.stderr)
        return 1
    finally:
        store.close()
