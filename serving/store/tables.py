"""The route store's schema: route versions, the audit log, API keys, stored responses and
conversations, as SQLAlchemy Core tables.

Off the request path: the gateway's poller reads these tables (through :class:`serving.store.RouteStore`)
and swaps the route table it serves from; the admin API, the canary controller and the ``turnout keys``
CLI write them. Only portable types and constraints are used, so the same schema is created on SQLite
(the default) and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# One immutable row per change of a route; the highest version of a route is the one in force.
route_versions = Table(
    "route_versions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("route", String(255), nullable=False),
    Column("version", Integer, nullable=False),
    Column("spec", Text, nullable=False),  # RouteSpec.model_dump_json()
    Column("author", String(255), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("reason", Text, nullable=False),
    Column("action", String(64), nullable=False),
    # Two writers that read the same current version cannot both add the next one.
    UniqueConstraint("route", "version", name="uq_route_versions_route_version"),
)

# Every write adds a row here, so max(id) is a cheap "something changed" marker for pollers.
audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Double, nullable=False),
    Column("actor", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("route", String(255), nullable=True),
    Column("version", Integer, nullable=True),
    Column("detail", Text, nullable=False),
    Index("ix_audit_route", "route"),
)

# Only the sha256 of a key is stored; ``prefix`` is its first characters, for people to recognise it.
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    Column("role", String(32), nullable=False),
    Column("key_hash", String(128), nullable=False, unique=True),
    Column("prefix", String(64), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("revoked_at", Double, nullable=True),
    Column("rpm", Integer, nullable=True),
    Column("tpm", Integer, nullable=True),
)

# A name is unique among the keys in force (a revoked key's name may be reused). Partial unique
# indexes exist on both SQLite and PostgreSQL; each dialect gets its own WHERE clause.
Index(
    "uq_api_keys_active_name",
    api_keys.c.name,
    unique=True,
    sqlite_where=api_keys.c.revoked_at.is_(None),
    postgresql_where=api_keys.c.revoked_at.is_(None),
)

# Stored Responses API answers (``serving.api.stored_responses``): what ``GET /v1/responses/{id}``
# returns and a ``previous_response_id`` continues, each readable only by the key that stored
# it, until it expires. Writes here never touch the audit log, so route pollers ignore them.
responses = Table(
    "responses",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("response", Text, nullable=False),  # the response object as returned (JSON)
    Column("input_items", Text, nullable=False),  # its own request's input items (JSON)
    Column("context", Text, nullable=False),  # every item a follow-up reads (JSON)
    Index("ix_responses_expires_at", "expires_at"),
)

# Conversations API (``serving.api.conversations_route``): a conversation and its items, in the
# order they were added (``seq``), each readable only by the key that made the conversation,
# until ``expires_at`` (moved on by every change to it). Not audited either.
conversations = Table(
    "conversations",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("metadata", Text, nullable=False),  # JSON object of strings
    Index("ix_conversations_expires_at", "expires_at"),
)

conversation_items = Table(
    "conversation_items",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # the order items were added in
    Column("conversation_id", String(255), nullable=False),
    Column("item_id", String(255), nullable=False),
    Column("item", Text, nullable=False),  # the item as listed (JSON)
    Index("ix_conversation_items_conversation", "conversation_id", "seq"),
)

# A background response's stream events (``serving.response_event_log``), for a client that
# reconnects to any gateway (``GET /v1/responses/{id}?stream=true&starting_after=N``); kept as
# long as the response.
response_events = Table(
    "response_events",
    metadata,
    Column("response_id", String(255), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),  # the event's sequence_number
    Column("event", Text, nullable=False),  # the event as streamed (SSE text)
    Column("expires_at", Double, nullable=False),
    Index("ix_response_events_expires_at", "expires_at"),
)

# Canary eval gate runs (``serving.canary_eval``): who runs a plan's eval, that it is still alive,
# and its result, so that the gateways on one store run it once between them.
canary_evals = Table(
    "canary_evals",
    metadata,
    Column("key", String(255), primary_key=True),  # route, the canary's start version, plan, gate
    Column("route", String(255), nullable=False),
    Column("claimant", String(255), nullable=False),  # the gateway process running it
    Column("claimed_at", Double, nullable=False),
    Column("heartbeat_at", Double, nullable=False),
    Column("result", Text, nullable=True),  # JSON: {"scores": {...}} or {"error": "..."}
)

# Background responses running now (``serving.api.background_responses``): the gateway running
# one beats here every second; a run whose beat is too old (its gateway was killed) is failed by
# the next read of its response.
background_runs = Table(
    "background_runs",
    metadata,
    Column("response_id", String(255), primary_key=True),
    Column("heartbeat_at", Double, nullable=False),
)

# Files API (``serving.api.files_route``): a batch's input file as uploaded, and the output and
# error files its run writes, each readable only by its owner's key, until ``expires_at``.
files = Table(
    "files",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("purpose", String(64), nullable=False),
    Column("filename", String(255), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=True),
    Column("content", LargeBinary, nullable=False),
    Index("ix_files_owner_created", "owner", "created_at"),
)

# Batch API (``serving.api.batches_route``, ``serving.batch_runner``): a batch, its state and who
# runs it (the gateway beating for it; another takes it over when the beat stops) ...
batches = Table(
    "batches",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("owner", String(255), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("status", String(32), nullable=False),
    Column("batch", Text, nullable=False),  # the rest of serving.batches.BatchRecord (JSON)
    Column("counts", Text, nullable=False),  # its RequestCounts (JSON), as of its last kept answers
    Column("claimant", String(255), nullable=True),
    Column("heartbeat_at", Double, nullable=True),
    Index("ix_batches_owner_created", "owner", "created_at"),
    Index("ix_batches_status", "status"),
)

# ... and its requests, each with its answer once it has a final one (a line without one is sent
# by whichever gateway runs the batch).
batch_requests = Table(
    "batch_requests",
    metadata,
    Column("batch_id", String(255), primary_key=True),
    Column("line", Integer, primary_key=True, autoincrement=False),  # its place in the input, from 0
    Column("custom_id", String(512), nullable=False),
    Column("body", Text, nullable=False),
    Column("status_code", Integer, nullable=True),  # None: not answered yet
    Column("result", Text, nullable=True),  # its output or error file line (JSON)
    Column("input_tokens", Integer, nullable=False, default=0),
    Column("output_tokens", Integer, nullable=False, default=0),
)
