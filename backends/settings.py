"""Typed settings for each backend kind, as written under ``variants:`` in gateway.yaml.

Kept apart from the adapters so that reading a config never imports an engine
(``backends/registry.py`` imports the adapter lazily, by kind).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator, model_validator

from backends.presets import OPENAI_HTTP_PRESETS, TRITON_PRESETS, apply_preset

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
    # The host's processor as named in deploy/accelerators.py (its price feeds cost reports).
    accelerator: str = "cpu-x86"
    batching: BatchingSettings = BatchingSettings()
    # Threads ONNX Runtime may use for one batch step (0 = its default).
    intra_op_threads: Annotated[int, Field(ge=0)] = 1
    # The longest sequence (prompt + answer) served; None = the model's own context length.
    max_model_len: Annotated[int, Field(ge=2)] | None = None
    # The deploy spec this variant was rendered from, when it was (turnout_variant_info's spec label).
    spec_name: str | None = None

    @field_validator("model_dir")
    @classmethod
    def _model_dir_holds_a_model(cls, folder: Path | None) -> Path | None:
        """Checked when the config is read, not when the gateway starts loading models."""
        if folder is not None and not (folder / "genai_config.json").is_file():
            raise ValueError(
                f"{folder} holds no genai_config.json (an ONNX Runtime GenAI model folder, "
                "such as `turnout model build` writes)"
            )
        return folder


class TimeoutSettings(StrictModel):
    """Seconds. Waiting for a free pooled connection and opening one share ``pool + connect``."""

    connect: Annotated[float, Field(gt=0)] = 5.0
    # Per wait for data, not for the whole answer; but a non-streamed answer sends nothing until
    # it is done, so this bounds its generation time: 600 s as the openai SDK (a long answer
    # from a busy engine takes minutes; 60 s turned those into 504s while the engine was fine).
    read: Annotated[float, Field(gt=0)] = 600.0
    pool: Annotated[float, Field(gt=0)] = 5.0


class BalanceSettings(StrictModel):
    """How a variant with ``replicas`` spreads requests (``serving/routing/balance.py``)."""

    policy: Literal["least_loaded", "power_of_two", "prefix_affinity"] = "power_of_two"
    # prefix_affinity: a request goes to the replica that took the longest start of its prompt
    # (of its first prefix_chars characters; its prefix cache holds it) while that one holds
    # fewer than max_imbalance requests more than the least loaded; else as power_of_two.
    prefix_chars: Annotated[int, Field(ge=128, le=1_000_000)] = 8192
    max_imbalance: Annotated[float, Field(ge=0)] = 10.0
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
    # Fills engine/vendor/accelerator unless set here (``backends/presets.py``): vllm-cuda,
    # vllm-rocm, vllm-tpu, vllm-cpu, trtllm-serve (TensorRT-LLM's OpenAI face), sglang.
    preset: str | None = None
    base_url: HttpUrl  # e.g. http://127.0.0.1:8001/v1
    model: str  # the model name the upstream serves
    engine: Literal["vllm", "trtllm-serve", "sglang", "turnout", "openai"] = "vllm"
    vendor: Vendor = "nvidia"
    accelerator: str = "unknown"
    api_key: str | None = None
    # What the upstream serves, where it serves one thing (vLLM serves either, by its runner):
    # generate (chat, completions, responses) or embed (embeddings); the other is refused with
    # a 400 before anything is sent. None: whatever it answers (another Turnout, a provider).
    task: Literal["generate", "embed"] | None = None
    timeouts: TimeoutSettings = TimeoutSettings()
    max_connections: Annotated[int, Field(ge=1)] = 256  # per replica
    replicas: tuple[HttpUrl, ...] = ()
    balance: BalanceSettings = BalanceSettings()
    # The deploy spec this variant was rendered from, when it was (turnout_variant_info's spec label).
    spec_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return apply_preset(data, OPENAI_HTTP_PRESETS)

    @model_validator(mode="after")
    def _distinct_replicas(self) -> OpenAIHttpSettings:
        urls = [str(url).rstrip("/") for url in (self.base_url, *self.replicas)]
        if len(set(urls)) != len(urls):
            raise ValueError("base_url and replicas must all be different servers")
        return self


class TritonServer(StrictModel):
    """One more Triton server of a replicated Triton variant (same model repository)."""

    url: HttpUrl | None = None
    grpc_url: Annotated[str, Field(pattern=r"^[^/\s]+:\d+$")] | None = None
    metrics_url: HttpUrl | None = None  # its Prometheus page, e.g. http://host:8002/metrics


class TritonSettings(StrictModel):
    """A Triton Inference Server model (``backends/triton.py``): its own, TensorRT-LLM's or vLLM's.

    ``tensors`` names the model's input/output convention: ``turnout`` (the shipped
    repository's ``text_input``, ``max_tokens``, ``temperature``… → ``text_output``,
    ``finish_reason``, token counts), ``trtllm`` (TensorRT-LLM's ensemble) or ``vllm``
    (Triton's vLLM backend: ``sampling_parameters`` JSON). Chats are rendered to text with
    ``chat_template`` (an HF folder; default: the shipped model's). Streamed requests go to
    ``stream_model`` (a decoupled model) when set, else to ``model``.
    """

    kind: Literal["triton"] = "triton"
    # Fills tensors/engine/model/vendor… unless set here (``backends/presets.py``):
    # trtllm-ensemble, triton-vllm, turnout-tiny.
    preset: str | None = None
    url: HttpUrl | None = None  # HTTP base, e.g. http://127.0.0.1:8010 (protocol generate)
    grpc_url: Annotated[str, Field(pattern=r"^[^/\s]+:\d+$")] | None = None  # host:port (protocol grpc)
    protocol: Literal["generate", "grpc"] = "generate"
    model: str
    stream_model: str | None = None
    # The model /v1/embeddings goes to (text_input → embedding, prompt_tokens: backends/triton_embed.py);
    # unset: the variant serves no embeddings (a 400 says so).
    embed_model: str | None = None
    tensors: Literal["turnout", "trtllm", "vllm"] = "turnout"
    engine: Literal["triton", "triton-trtllm", "triton-vllm"] = "triton"
    vendor: Vendor = "nvidia"
    accelerator: str = "unknown"
    chat_template: Path | None = None
    # The server's tokenizer adds BOS itself (the shipped models, TensorRT-LLM's preprocessing,
    # vLLM): drop the chat template's leading BOS text so the prompt does not get two.
    server_adds_bos: bool = True
    # What each streamed response's text_output holds: the new text, or all text so far.
    stream_text: Literal["delta", "cumulative"] = "delta"
    end_id: int | None = None  # tensors: trtllm (default: the model's own)
    pad_id: int | None = None
    # max_tokens of a chat that sets none (a completion's default is OpenAI's 16).
    default_max_tokens: Annotated[int, Field(ge=1)] = 256
    timeouts: TimeoutSettings = TimeoutSettings()
    max_connections: Annotated[int, Field(ge=1)] = 256
    # Load-aware replicas (backends/replica_set.py): more servers of the same model, chosen per
    # request by their queues (nv_inference_pending_request_count on each one's metrics_url).
    metrics_url: HttpUrl | None = None  # this server's Prometheus page (needed with replicas)
    replicas: tuple[TritonServer, ...] = ()
    balance: BalanceSettings = BalanceSettings()
    # The deploy spec this variant was rendered from, when it was (turnout_variant_info's spec label).
    spec_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return apply_preset(data, TRITON_PRESETS)

    @model_validator(mode="after")
    def _endpoint_for_protocol(self) -> TritonSettings:
        for index, server in enumerate(self.servers()):
            where = f"replicas.{index - 1}." if index else ""
            if self.protocol == "generate" and server.url is None:
                raise ValueError(
                    f"{where}url: protocol generate needs url (Triton's HTTP base, e.g. http://h:8000)"
                )
            if self.protocol == "grpc" and server.grpc_url is None:
                raise ValueError(f"{where}grpc_url: protocol grpc needs grpc_url (host:port, e.g. h:8001)")
            if self.replicas and server.metrics_url is None:
                raise ValueError(f"{where}metrics_url: a replicated variant needs each server's metrics page")
        addresses = [str(s.url if self.protocol == "generate" else s.grpc_url) for s in self.servers()]
        if len(set(addresses)) != len(addresses):
            raise ValueError("the server and its replicas must all be different servers")
        return self

    def servers(self) -> list[TritonServer]:
        """Every server of the variant, this one first (its metrics_url may be unset alone)."""
        first = TritonServer.model_construct(
            url=self.url, grpc_url=self.grpc_url, metrics_url=self.metrics_url
        )
        return [first, *self.replicas]


VariantSettings = Annotated[
    EmbeddedSettings | OpenAIHttpSettings | TritonSettings, Field(discriminator="kind")
]
