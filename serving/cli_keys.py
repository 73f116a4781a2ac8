"""``turnout keys create|list|revoke``: manage API keys and admin tokens in the store.

Off the request path: an operator's command that writes straight to the route store
(``serving.store``), the same database the gateways poll; a running gateway picks a new
or revoked key up on its next poll and rebuilds its ``serving.auth.KeyRing``. With ``--url``
it asks a gateway's admin API instead (``/admin/keys``, an admin token), for an operator who
reaches the gateway but not its database. Only the key's SHA-256 is stored: ``create`` prints
the key once (alone on stdout, so scripts can capture it) and it cannot be shown again.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from serving.auth import ROLES, Role
from serving.cli_types import key_name
from serving.errors import ConfigError, TurnoutError

if TYPE_CHECKING:
    from serving.cli_routes import AdminClient
    from serving.store import RouteStore


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
    parser.add_argument("--url", default=default, help="a gateway's admin API instead of the store")
    parser.add_argument(
        "--token", default=default, help="admin token for --url (default: $TURNOUT_ADMIN_TOKEN)"
    )


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else ``--config``'s store.url, else ``$TURNOUT_STORE_URL`` or the SQLite default."""
    from serving.config import default_store_url, load_config

    if getattr(args, "store", None):
        return str(args.store)
    if getattr(args, "config", None):
        return load_config(Path(args.config)).store.url
    return default_store_url()


def keys_table(records: list[dict[str, Any]], *, with_revoked: bool = False) -> str:
    """Keys as ``ApiKeyRecord.as_dict`` (and ``GET /admin/keys``) give them."""
    from serving.cli_routes_pure import format_time, render_table

    headers = ["name", "role", "prefix", "created", "rpm", "tpm"]
    if with_revoked:
        headers.append("revoked")
    rows = []
    for record in records:
        row = [
            str(record["name"]),
            str(record["role"]),
            f"{record['prefix']}…",
            format_time(record["created_at"]),
        ]
        row += ["-" if record[limit] is None else str(record[limit]) for limit in ("rpm", "tpm")]
        if with_revoked:
            row.append(format_time(record["revoked_at"]))
        rows.append(row)
    return render_table(headers, rows)


class _Keys(Protocol):
    """Where the keys are: the store itself, or a gateway's admin API."""

    def create(
        self, name: str, role: Role, rpm: int | None, tpm: int | None
    ) -> tuple[str, dict[str, Any]]: ...
    def listed(self, include_revoked: bool) -> list[dict[str, Any]]: ...
    def revoke(self, name: str) -> dict[str, Any]: ...


class _StoreKeys:
    def __init__(self, store: RouteStore) -> None:
        self.store, self.actor = store, f"cli:{getpass.getuser()}"

    def create(self, name: str, role: Role, rpm: int | None, tpm: int | None) -> tuple[str, dict[str, Any]]:
        key, record = self.store.issue_key(name=name, role=role, rpm=rpm, tpm=tpm, actor=self.actor)
        return key, record.as_dict()

    def listed(self, include_revoked: bool) -> list[dict[str, Any]]:
        return [record.as_dict() for record in self.store.keys(include_revoked=include_revoked)]

    def revoke(self, name: str) -> dict[str, Any]:
        return self.store.revoke_key(name, actor=self.actor).as_dict()


class _ApiKeys:
    def __init__(self, client: AdminClient) -> None:
        self.client = client

    def create(self, name: str, role: Role, rpm: int | None, tpm: int | None) -> tuple[str, dict[str, Any]]:
        made = self.client.call(
            "POST", "/admin/keys", body={"name": name, "role": role, "rpm": rpm, "tpm": tpm}
        )
        return str(made.pop("key")), made

    def listed(self, include_revoked: bool) -> list[dict[str, Any]]:
        params = {"all": "true" if include_revoked else "false"}
        return list(self.client.call("GET", "/admin/keys", params=params)["keys"])

    def revoke(self, name: str) -> dict[str, Any]:
        return dict(self.client.call("DELETE", f"/admin/keys/{quote(name, safe='')}"))


def _execute(keys: _Keys, args: argparse.Namespace) -> int:
    if args.keys_command == "create":
        key, record = keys.create(args.name, args.role, args.rpm, args.tpm)
        print(key)
        print(
            f"created {record['role']} key '{record['name']}'. This is the only time the key is shown: "
            "Turnout stores only its hash, so keep it now.",
            file=sys.stderr,
        )
        return 0
    if args.keys_command == "list":
        records = keys.listed(args.all)
        if args.json:
            print(json.dumps(records, indent=2))
        elif records:
            print(keys_table(records, with_revoked=args.all))
        else:
            print("no keys", file=sys.stderr)
        return 0
    record = keys.revoke(args.name)
    print(f"revoked key '{record['name']}' ({record['role']}, {record['prefix']}…)")
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    import httpx

    from serving.cli_routes import AdminClient, ApiError, say_api_error

    if args.store or args.config:
        print("turnout: --url asks a gateway; --store and --config name a store: give one", file=sys.stderr)
        return 2
    token = args.token or os.environ.get("TURNOUT_ADMIN_TOKEN") or None
    try:
        client = AdminClient(args.url, token)
    except httpx.InvalidURL as exc:
        print(f"turnout: --url {args.url!r} is not a URL ({exc})", file=sys.stderr)
        return 2
    try:
        return _execute(_ApiKeys(client), args)
    except ApiError as exc:
        say_api_error(exc, "pass --token or set $TURNOUT_ADMIN_TOKEN (an admin's)")
        return 1
    finally:
        client.close()


def run(args: argparse.Namespace) -> int:
    """Run one ``turnout keys`` command; 0 ok, 1 on a store or API error (name taken, no such key),
    2 on config."""
    if getattr(args, "url", None):
        return _run_remote(args)
    if getattr(args, "token", None):  # a store has no tokens to check: the caller meant --url
        print("turnout: --token goes with --url (a gateway's admin API)", file=sys.stderr)
        return 2
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
        return _execute(_StoreKeys(store), args)
    except TurnoutError as exc:
        print(f"turnout: {exc.message}", file=sys.stderr)
        return 1
    finally:
        store.close()
