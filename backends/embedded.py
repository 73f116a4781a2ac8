"""The embedded engine adapter: the shipped model on ONNX Runtime GenAI, in-process.

Sits behind the Backend protocol like any remote engine. On the event loop it renders
the chat template, tokenizes, checks the context budget and submits a sequence to the
dynamic batcher; the worker thread (``backends.ortgenai_runner``) decodes and hands
text back through ``call_soon_threadsafe``. When the consumer goes away (client
disconnect) the sequence is cancelled and leaves its batch at the next step.

Logprobs (``backends.logprobs``): a request that asks for them gets a
:class:`ScoredSequence`, whose tokens the worker scores from the logits it sampled from;
``echo`` puts the prompt (and its tokens' logprobs, from the same prompt pass) first.
``echo`` with ``max_tokens: 0`` only scores the prompt, in one forward pass outside the batcher.
Embeddings (``/v1/embeddings``) have a batcher and thread of their own (``backends.embedded_embeddings``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import BackendInfo, Chunk, Completion, Embeddings, EmbedRequest, GenerateRequest, Usage
from backends.chat_template import ChatTemplate
from backends.dynamic_batcher import DynamicBatcher
from backends.embedded_embeddings import EmbeddingGraph, EmbeddingRunner
from backends.logprobs import (
    CompletionLogprobs,
    TokenScore,
    chat_content,
    merge_logprobs,
    prompt_scores,
    without_leading,
)
from backends.openai_fields import LogprobOptions, check_extra, logprob_options
from backends.ortgenai_runner import Event, GenAIModel, PromptTooLong, ScoredSequence, Sequence
from backends.settings import EmbeddedSettings
from deploy.model.artifacts import EMBEDDING_GRAPH, onnx_dir
from serving.errors import BackendError, ClientError

DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class EmbeddedBackend:
    def __init__(self, name: str, settings: EmbeddedSettings) -> None:
        self.name = name
        self.settings = settings
        self.info = BackendInfo(
            kind="embedded",
            engine="onnxruntime-genai",
            vendor="cpu",
            accelerator=settings.accelerator,
            cancel_on_disconnect=True,
            queue_size=settings.batching.max_queue_size,
        )
        self._model: GenAIModel | None = None
        self._batcher: DynamicBatcher[Sequence] | None = None
        self._template: ChatTemplate | None = None
        self._batch_observer: Any = None
        self._embeddings: EmbeddingRunner | None = None

    # ---- lifecycle -----------------------------------------------------------------

    def _folder(self) -> Any:
        if self.settings.model_dir is not None:
            return self.settings.model_dir
        return onnx_dir(self.settings.precision)

    async def start(self) -> None:
        settings = self.settings
        model = await asyncio.to_thread(
            GenAIModel, self._folder(), settings.intra_op_threads, settings.max_model_len
        )
        if model.chat_template:
            self._template = ChatTemplate(model.chat_template, model.bos_token, model.eos_token)
        batcher = DynamicBatcher[Sequence](
            self.name, self.settings.batching, model.run_batch, on_batch=self._batch_observer
        )
        batcher.start()
        self._model, self._batcher = model, batcher
        folder = Path(self._folder())
        if (folder / EMBEDDING_GRAPH).is_file():  # a model built before embeddings were: generation only
            graph = await asyncio.to_thread(EmbeddingGraph, folder, settings.intra_op_threads)
            self._embeddings = EmbeddingRunner(self.name, graph, settings.batching)

    async def close(self) -> None:
        if self._embeddings is not None:
            await asyncio.to_thread(self._embeddings.close)
            self._embeddings = None
        if self._batcher is not None:
            await asyncio.to_thread(self._batcher.stop)
            self._batcher = None

    def ready(self) -> bool:
        return self._batcher is not None

    def queue_depth(self) -> int:
        return self._batcher.depth() if self._batcher is not None else 0

    def engine_stats(self) -> dict[str, float]:
        generated = self._model.generated_tokens if self._model is not None else 0
        return {"queue_depth": float(self.queue_depth()), "generated_tokens": float(generated)}

    def set_batch_observer(self, observer: Any) -> None:
        self._batch_observer = observer
        if self._batcher is not None:
            self._batcher.on_batch = observer

    @property
    def context_length(self) -> int:
        return self._loaded().context_length

    def _loaded(self) -> GenAIModel:
        if self._model is None:
            raise BackendError(f"variant '{self.name}' is not started")
        return self._model

    # ---- request path --------------------------------------------------------------

    def encode_prompt(self, request: GenerateRequest) -> np.ndarray:
        """The token ids the model reads: a text prompt gets BOS first, a token-id prompt is as sent."""
        model = self._loaded()
        try:
            return self._encode(model, request)
        except ValueError as exc:  # text the tokenizer cannot read, or cannot fit
            code = "context_length_exceeded" if isinstance(exc, PromptTooLong) else "invalid_value"
            where = "messages" if request.kind == "chat" else "prompt"
            raise ClientError(str(exc), param=where, code=code) from exc

    async def count_tokens(self, request: GenerateRequest) -> int:
        """The prompt's tokens, BOS included, as a generation of it would count them."""
        return len(self.encode_prompt(request))

    def _encode(self, model: GenAIModel, request: GenerateRequest) -> np.ndarray:
        if request.kind == "chat":
            if self._template is None:
                raise ClientError("this model has no chat template; use /v1/completions", param="messages")
            return model.encode(self._template.render(request.messages or []))
        return model.prompt_ids(
            request.prompt_ids if request.prompt_ids is not None else request.prompt or ""
        )

    def _max_new_tokens(self, request: GenerateRequest, prompt_tokens: int) -> int:
        context = self._loaded().context_length
        requested = request.params.max_tokens
        if requested is None:
            default = DEFAULT_COMPLETION_MAX_TOKENS if request.kind == "completion" else context
            requested = max(1, min(default, context - prompt_tokens))
        if prompt_tokens + requested > context:
            where = "messages" if request.kind == "chat" else "prompt"
            raise ClientError(
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{prompt_tokens + requested} tokens ({prompt_tokens} in the {where}, {requested} in the "
                f"completion). Please reduce the length of the {where} or completion.",
                param=where if prompt_tokens >= context else "max_tokens",  # what has to shrink
                code="context_length_exceeded",
            )
        return requested

    def _echo_text(self, request: GenerateRequest) -> str:
        if request.prompt_ids is None:
            return request.prompt or ""
        return self._loaded().token_table.text(request.prompt_ids)

    def _client_tokens(self, request: GenerateRequest, scores: list[TokenScore]) -> list[TokenScore]:
        """The prompt's scores over the tokens the client sent (not the BOS added to a text prompt)."""
        return scores if request.prompt_ids is not None else without_leading(scores)

    def _writer(self, request: GenerateRequest, options: LogprobOptions) -> Any:
        """Scores → this request's logprobs shape (chat ``content`` or the legacy lists)."""
        table = self._loaded().token_table
        if request.kind == "chat":
            top = options.top or 0
            return lambda scores: chat_content(scores, table, top)
        return CompletionLogprobs(table).block

    async def _score_prompt(
        self, request: GenerateRequest, ids: np.ndarray, options: LogprobOptions
    ) -> Chunk:
        """``echo`` with ``max_tokens: 0``: the prompt back, with its tokens' logprobs if asked."""
        model = self._loaded()
        usage = Usage(prompt_tokens=len(ids), completion_tokens=0)
        text = self._echo_text(request)
        if options.top is None:
            return Chunk(text, "length", usage)
        top = options.top
        scores = await asyncio.to_thread(lambda: prompt_scores(model.prompt_logits(ids), ids.tolist(), top))
        block = self._writer(request, options)(self._client_tokens(request, scores))
        return Chunk(text, "length", usage, logprobs=block)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        options, extra = logprob_options(request.kind, request.extra)
        check_extra(extra, "the embedded engine")
        batcher = self._batcher
        if batcher is None:
            raise BackendError(f"variant '{self.name}' is not started")
        prompt = self.encode_prompt(request)
        max_new = self._max_new_tokens(request, len(prompt))
        if options.echo and max_new == 0:
            yield await self._score_prompt(request, prompt, options)
            return
        params = request.params.with_default_temperature(self._loaded().default_temperature)
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Event] = asyncio.Queue()
        seq: Sequence
        write = None
        if options.top is None:
            seq = Sequence(prompt, params, max_new, loop, inbox.put_nowait)
        else:
            seq = ScoredSequence(prompt, params, max_new, loop, inbox.put_nowait, top=options.top)
            seq.score_prompt = options.echo
            write = self._writer(request, options)
        echo = self._echo_text(request) if options.echo else None
        batcher.submit(seq)
        try:
            while True:
                text, finish, generated = await inbox.get()
                logprobs = None
                if write is not None:
                    assert isinstance(seq, ScoredSequence)
                    scores = seq.scores.popleft()
                    if echo is not None:
                        scores = self._client_tokens(request, seq.prompt_scores or []) + scores
                    logprobs = write(scores)
                if echo is not None:
                    text, echo = echo + text, None
                if finish is None:
                    yield Chunk(text=text, logprobs=logprobs)
                    continue
                if finish == "error":
                    raise BackendError(f"the embedded engine failed while generating on '{self.name}'")
                usage = Usage(prompt_tokens=len(prompt), completion_tokens=generated)
                stop_reason = seq.scanner.matched if finish == "stop" else None
                yield Chunk(text, finish, usage, logprobs, stop_reason=stop_reason)
                return
        finally:
            seq.cancel_requested = True
            batcher.withdraw(seq)  # if still queued (the client left before its batch began)

    async def complete(self, request: GenerateRequest) -> Completion:
        parts: list[str] = []
        logprobs: dict[str, Any] | None = None
        async for chunk in self.stream(request):
            parts.append(chunk.text)
            if chunk.logprobs is not None:
                logprobs = merge_logprobs(logprobs, chunk.logprobs)
            if chunk.finish_reason is not None:
                usage = chunk.usage or Usage()
                text = "".join(parts)
                return Completion(text, chunk.finish_reason, usage, logprobs, stop_reason=chunk.stop_reason)
        raise BackendError(f"the embedded engine ended without a finish on '{self.name}'")

    async def embed(self, request: EmbedRequest) -> Embeddings:
        check_extra(request.extra, "the embedded engine")
        model, runner = self._loaded(), self._embeddings
        if runner is None:
            raise ClientError(
                f"variant '{self.name}' serves no embeddings: its model folder has no {EMBEDDING_GRAPH} "
                "(`turnout model build` writes one)",
                param="model",
                code="model_not_supported",
            )
        request.check_dimensions(runner.graph.dimensions)
        rows = [self._embedding_ids(model, index, given) for index, given in enumerate(request.inputs)]
        vectors = await runner.embed(rows)
        return Embeddings(vectors, sum(len(row) for row in rows))

    def _embedding_ids(self, model: GenAIModel, index: int, given: str | tuple[int, ...]) -> np.ndarray:
        """An input's token ids: a text gets BOS first (as vLLM's tokenizer adds it), ids are as sent."""
        try:
            ids = model.prompt_ids(given)
        except ValueError as exc:  # ids outside the vocabulary, a NUL the tokenizer cannot read…
            code = "context_length_exceeded" if isinstance(exc, PromptTooLong) else "invalid_value"
            raise ClientError(f"input {index}: {exc}", param="input", code=code) from exc
        context = model.context_length
        if len(ids) > context:
            raise ClientError(
                f"This model's maximum context length is {context} tokens. However, input {index} has "
                f"{len(ids)} tokens. Please reduce the length of the input.",
                param="input",
                code="context_length_exceeded",
            )
        return ids
