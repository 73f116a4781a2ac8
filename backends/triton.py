"""Adapter for Triton Inference Server: the shipped models, TensorRT-LLM's ensemble, vLLM's backend.

It sits between ``serving.gateway`` and ``tritonserver`` on the request path: a chat is rendered
to text with the model's chat template (``backends/chat_template.py``), the request is mapped
onto the model's tensor convention (``backends/triton_tensors.py``) and sent over Triton's HTTP
generate extension (``triton_http.py``) or gRPC (``triton_grpc.py``); each response's outputs
come back as new text (stop strings applied here), then a finish reason and usage.

A model's config is read once, on first use: whether it is decoupled (then even a whole answer
is collected from its stream, since Triton refuses ``/generate`` and ``ModelInfer`` on it), its
batch dimension and the inputs it declares (only those are sent). Streamed requests go to
``stream_model`` when set; a model that cannot stream answers in one chunk. ``/v1/embeddings``
goes to ``embed_model`` when set (``backends/triton_embed.py``), else a 400 says it is not.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

from backends.base import BackendInfo, Chunk, Completion, Embeddings, EmbedRequest, GenerateRequest, Usage
from backends.chat_template import ChatTemplate
from backends.settings import TritonSettings
from backends.triton_configs import ModelConfigs
from backends.triton_embed import embedding_inputs, no_embed_model, read_embeddings
from backends.triton_tensors import ModelFacts, RequestPlan, ResponseReader, plan_request
from serving.errors import BackendError, ClientError, ConfigError


class Transport(Protocol):
    """What ``triton_http.TritonHttp`` and ``triton_grpc.TritonGrpc`` both offer."""

    @property
    def started(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def model_config(self, model: str) -> dict[str, Any]: ...

    async def infer(self, facts: ModelFacts, inputs: dict[str, Any], request_id: str) -> dict[str, Any]: ...

    def stream(
        self, facts: ModelFacts, inputs: dict[str, Any], request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]: ...


def load_template(settings: TritonSettings) -> ChatTemplate | None:
    """The chat template of ``settings.chat_template`` (default: the shipped model's HF folder)."""
    if settings.chat_template is not None:
        folder = settings.chat_template
    else:
        from deploy.model.artifacts import hf_dir

        folder = hf_dir()
    try:
        return ChatTemplate.from_folder(folder)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"chat_template {folder}: cannot read tokenizer_config.json: {exc}") from None


class TritonBackend:
    """One model (and optionally its streaming twin) on one Triton server."""

    def __init__(self, name: str, settings: TritonSettings) -> None:
        self.name = name
        self.settings = settings
        self.info = BackendInfo(
            kind="triton", engine=settings.engine, vendor=settings.vendor, accelerator=settings.accelerator
        )
        self._template = load_template(settings)
        self._transport: Transport
        if settings.protocol == "grpc":
            from backends.triton_grpc import TritonGrpc  # ConfigError with the pip hint if missing

            self._transport = TritonGrpc(name, settings)
        else:
            from backends.triton_http import TritonHttp

            self._transport = TritonHttp(name, settings)
        self._configs = ModelConfigs(name, self._transport.model_config)

    async def start(self) -> None:
        await self._transport.start()

    async def close(self) -> None:
        await self._transport.close()

    def ready(self) -> bool:
        return self._transport.started

    # ---- request path --------------------------------------------------------------

    def prompt(self, request: GenerateRequest) -> str:
        if request.prompt_ids is not None:
            raise ClientError(
                "token-id prompts are not supported by Triton variants; send text",
                param="prompt",
                code="unsupported_value",
            )
        if request.kind != "chat":
            return request.prompt or ""
        if self._template is None:
            raise ClientError("this model has no chat template; use /v1/completions", param="messages")
        text = self._template.render(request.messages or [])
        bos = self._template.bos_token
        if self.settings.server_adds_bos and bos and text.startswith(bos):
            text = text[len(bos) :]  # the server's tokenizer puts it back
        return text

    def plan(self, request: GenerateRequest) -> RequestPlan:
        s = self.settings
        return plan_request(
            s.tensors,
            request,
            self.prompt(request),
            default_max_tokens=s.default_max_tokens,
            end_id=s.end_id,
            pad_id=s.pad_id,
        )

    async def facts(self, model: str) -> ModelFacts:
        """The model's config, read on first use (and again after a failed read)."""
        return await self._configs.facts(model)

    async def _responses(
        self, facts: ModelFacts, inputs: dict[str, Any], request_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        if facts.decoupled:
            async with aclosing(self._transport.stream(facts, inputs, request_id)) as responses:
                async for outputs in responses:
                    yield outputs
        else:
            yield await self._transport.infer(facts, inputs, request_id)

    def _model(self, stream: bool) -> str:
        if stream and self.settings.stream_model:
            return self.settings.stream_model
        return self.settings.model

    async def _prepare(
        self, request: GenerateRequest, stream: bool
    ) -> tuple[ModelFacts, dict[str, Any], ResponseReader]:
        """The model to ask, its inputs, and the reader of its responses."""
        plan = self.plan(request)  # a 400 for what the tensors cannot say, before any network
        model = self._model(stream)
        facts = self._configs.cached(model) or await self._configs.facts(model)
        inputs = plan.inputs_for(facts, stream=stream and facts.decoupled)
        echo = plan.echo if facts.inputs and "exclude_input_in_output" not in facts.inputs else ""
        reader = ResponseReader(plan, cumulative=self.settings.stream_text == "cumulative", echo=echo)
        return facts, inputs, reader

    async def _chunks(
        self, facts: ModelFacts, inputs: dict[str, Any], reader: ResponseReader, request_id: str
    ) -> AsyncGenerator[Chunk, None]:
        async with aclosing(self._responses(facts, inputs, request_id)) as responses:
            async for outputs in responses:
                text = reader.feed(outputs)
                if text:
                    yield Chunk(text=text)
                if reader.stopped:
                    break  # a stop string: closing the stream tells Triton to stop too
        tail, finish, usage = reader.finish()
        yield Chunk(text=tail, finish_reason=finish, usage=usage, stop_reason=reader.stop_reason)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        for attempt in (1, 2):
            facts, inputs, reader = await self._prepare(request, stream=True)
            sent = False
            try:
                async with aclosing(self._chunks(facts, inputs, reader, request.request_id)) as chunks:
                    async for chunk in chunks:
                        sent = True
                        yield chunk
                return
            except ClientError as exc:  # refused before any output: a changed config is read again
                if sent or attempt == 2 or not await self._refused_for_config(exc, facts):
                    raise

    async def complete(self, request: GenerateRequest) -> Completion:
        facts, inputs, reader = await self._prepare(request, stream=False)
        try:
            return await self._complete(request, facts, inputs, reader)
        except ClientError as exc:
            if not await self._refused_for_config(exc, facts):
                raise
        facts, inputs, reader = await self._prepare(request, stream=False)  # shaped for the new config
        return await self._complete(request, facts, inputs, reader)

    async def embed(self, request: EmbedRequest) -> Embeddings:
        """The inputs' vectors from the model ``embed_model`` names (``backends.triton_embed``)."""
        model = self.settings.embed_model
        if model is None:
            raise no_embed_model(self.name)
        inputs = embedding_inputs(request)  # a 400 for what it cannot take, before any network
        facts = self._configs.cached(model) or await self._configs.facts(model)
        outputs = await self._transport.infer(facts, inputs, request.request_id)
        embeddings = read_embeddings(self.name, outputs, len(request.inputs))
        request.check_dimensions(embeddings.vectors.shape[1])
        return embeddings

    async def _refused_for_config(self, exc: ClientError, facts: ModelFacts) -> bool:
        """Whether Triton refused the request (not the gateway's own checks) and the model's
        config is another than the one it was shaped by: then it is worth sending once more."""
        return exc.code == "triton_rejected" and await self._configs.changed_since(facts)

    async def _complete(
        self, request: GenerateRequest, facts: ModelFacts, inputs: dict[str, Any], reader: ResponseReader
    ) -> Completion:
        if not facts.decoupled:  # one request, one response: no generators on the hot path
            text = reader.feed(await self._transport.infer(facts, inputs, request.request_id))
            tail, finish, usage = reader.finish()
            return Completion(text + tail, finish, usage, stop_reason=reader.stop_reason)
        parts: list[str] = []  # a decoupled model: gather its responses
        async with aclosing(self._chunks(facts, inputs, reader, request.request_id)) as chunks:
            async for chunk in chunks:
                parts.append(chunk.text)
                if chunk.finish_reason is not None:
                    usage, stop_reason = chunk.usage or Usage(), chunk.stop_reason
                    return Completion("".join(parts), chunk.finish_reason, usage, stop_reason=stop_reason)
        raise BackendError(f"Triton variant {self.name} ended without a finish")
