"""Typed settings for each backend kind, as written under ``variants:`` in gateway.yaml.

Kept apart from the adapters so that reading a config never imports an engine
(``backends/registry.py`` imports the adapter lazily, by kind).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

Vendor = Literal["nvidia", "amd", "google", "intel", "cpu"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BatchingSettings(StrictModel):
    """Triton-style dynamic batching: wait up to ``max_queue_delay_ms`` to fill a batch."""

    max_batch_size: Annotated[int, Field(ge=1, le=32)] = 16
    max_queue_delay_ms: Annotated[float, Field(ge=0, le=1000)] = 2.0
    max_queue_size: Annotated[int, Field(ge=1)] = 256


class EmbeddedSettings(StrictModel):
    """The in-process ONNX Runtime GenAI engine (``backends/embedded.py``)."""

    kind: Literal["embedded"] = "embedded"
    # A folder holding genai_config.json; None means the shipped model at ``precision``.
    model_dir: Path | None = None
    precision: Literal["fp32", "int8", "int4"] = "fp32"
    batching: BatchingSettings = BatchingSettings()
    # Threads ONNX Runtime may use for one batch step (0 = its default).
    intra_op_threads: Annotated[int, Field(ge=0)] = 1


class TimeoutSettings(StrictModel):
    """Seconds. Waiting for a free pooled connection and opening one share ``pool + connect``."""

    connect: Annotated[float, Field(gt=0)] = 5.0
    read: Annotated[float, Field(gt=0)] = 60.0  # per wait for data, not for the whole answer
    pool: Annotated[float, Field(gt=0)] = 5.0


class BalanceSettings(StrictModel):
    """How a variant with ``replicas`` spreads requests (``serving/routing/balance.py``)."""

    policy: Literal["least_loaded", "power_of_two"] = "power_of_two"
    # How often each replica's own /metrics is scraped (``backends/load_probe.py``).
    probe_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    probe_timeout_s: Annotated[float, Field(gt=0, le=60)] = 0.5
    # Where the metrics live, relative to the server root (base_url without its /v1).
    metrics_path: Annotated[str, Field(pattern=r"^/")] = "/metrics"


class OpenAIHttpSettings(StrictModel):
    """Any OpenAI-compatible server: vLLM (CUDA/ROCm/TPU/CPU), trtllm-serve, SGLang.

    ``replicas`` lists more servers of the same model; with any, the variant becomes a
    load-aware replica set (``backends/replica_set.py``) whose replica 0 is ``base_url``.
    """

    kind: Literal["openai_http"] = "openai_http"
    base_url: HttpUrl  # e.g. http://127.0.0.1:8001/v1
    model: str  # the model name the upstream serves
    engine: Literal["vllm", "trtllm-serve", "sglang", "turnout", "openai"] = "vllm"
    vendor: Vendor = "nvidia"
    accelerator: str = "unknown"
    api_key: str | None = None
    timeouts: TimeoutSettings = TimeoutSettings()
    max_connections: Annotated[int, Field(ge=1)] = 256  # per replica
    replicas: tuple[HttpUrl, ...] = ()
    balance: BalanceSettings = BalanceSettings()

    @model_validator(mode="after")
    def _distinct_replicas(self) -> OpenAIHttpSettings:
        urls = [str(url).rstrip("/") for url in (self.base_url, *self.replicas)]
        if len(set(urls)) != len(urls):
            raise ValueError("base_url and replicas must all be different servers")
        return self


VariantSettings = Annotated[EmbeddedSettings | OpenAIHttpSettings, Field(discriminator="kind")]
