"""Variant settings → backend adapter, importing each adapter module only when used.

Called once per variant by ``serving.app`` at start-up (an ``openai_http`` or ``triton`` variant
with ``replicas`` becomes a ``backends.replica_set.ReplicaSetBackend``); a missing optional engine
package fails here with the exact ``pip install`` hint, not at import time.
"""

from __future__ import annotations

from backends.base import Backend
from backends.settings import EmbeddedSettings, OpenAIHttpSettings, TritonSettings


def build_backend(name: str, settings: EmbeddedSettings | OpenAIHttpSettings | TritonSettings) -> Backend:
    if isinstance(settings, EmbeddedSettings):
        from backends.embedded import EmbeddedBackend

        return EmbeddedBackend(name, settings)
    if settings.replicas:  # several servers: load-aware choice per request
        from backends.replica_set import ReplicaSetBackend

        return ReplicaSetBackend(name, settings)
    if isinstance(settings, TritonSettings):
        from backends.triton import TritonBackend  # protocol grpc: ConfigError without tritonclient

        return TritonBackend(name, settings)
    from backends.openai_http import OpenAIHttpBackend  # one server: the bare adapter, no wrapper

    return OpenAIHttpBackend(name, settings)
