"""Route versions, audit log and API keys in one SQL database (SQLite file by default, any SQLAlchemy URL).

Off the request path: the gateway's poller reads the store (change marker, then the current versions)
and swaps the route table the request path decides from; the admin API, the canary controller and the
``turnout keys`` CLI write it. Synchronous: async callers use ``asyncio.to_thread``.
"""

from serving.store.records import ApiKeyRecord, AuditEntry, RouteVersion
from serving.store.route_store import RouteStore

__all__ = ["ApiKeyRecord", "AuditEntry", "RouteStore", "RouteVersion"]
