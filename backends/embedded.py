"""The embedded engine adapter: the shipped model on ONNX Runtime GenAI, in-process.

Sits behind the Backend protocol like any remote engine. On the event loop it renders
the chat template, tokenizes, checks the context budget and submits a sequence to the
dynamic batcher; the worker thread (``backends.ortgenai_runner``) decodes and hands
text back through ``call_soon_threadsafe``. When the consumer goes away (client
disconnect) the sequence is cancelled and leaves its batch at the next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np

from backends.base import BackendInfo, Chunk, Completion, GenerateRequest, Usage
from backends.chat_template import ChatTemplate
from backends.dynamic_batcher import DynamicBatcher
from backends.logprobs import MAX_LOGPROBS, prompt_logprobs
from backends.openai_fields import check_extra
from backends.ortgenai_runner import Event, GenAIModel, Sequence
from backends.settings import EmbeddedSettings
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
        )
        self._model: GenAIModel | None = None
        self._batcher: DynamicBatcher[Sequence] | None = None
        self._template: ChatTemplate | None = None
        self._batch_observer: Any = None

    # ---- lifecycle -----------------------------------------------------------------

    def _folder(self) -> Any:
        if self.settings.model_dir is not None:
            return self.settings.model_dir
        from deploy.model.artifacts import onnx_dir

        return onnx_dir(self.settings.precision)

    async def start(self) -> None:
        model = await asyncio.to_thread(GenAIModel, self._folder(), self.settings.intra_op_threads)
        if model.chat_template:
            self._template = ChatTemplate(model.chat_template, model.bos_token, model.eos_token)
        batcher = DynamicBatcher[Sequence](
            self.name, self.settings.batching, model.run_batch, on_batch=self._batch_observer
        )
        batcher.start()
        self._model, self._batcher = model, batcher

    async def close(self) -> None:
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
        model = self._loaded()
        if request.kind == "chat":
            if self._template is None:
                raise ClientError("this model has no chat template; use /v1/completions", param="messages")
            return model.encode(self._template.render(request.messages or []))
        prompt = model.encode(request.prompt or "")
        return np.concatenate([np.array([model.bos_id], dtype=np.int32), prompt])

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
                param="max_tokens",
                code="context_length_exceeded",
            )
        return requested

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        check_extra(request.extra, "the embedded engine")
        batcher = self._batcher
        if batcher is None:
            raise BackendError(f"variant '{self.name}' is not started")
        prompt = self.encode_prompt(request)
        max_new = self._max_new_tokens(request, len(prompt))
        params = request.params
        if params.temperature is None:
            params = replace(params, temperature=self._loaded().default_temperature)
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Event] = asyncio.Queue()
        seq = Sequence(
            prompt_ids=prompt,
            params=params,
            max_new_tokens=max_new,
            loop=loop,
            receive=inbox.put_nowait,
        )
        batcher.submit(seq)
        try:
            while True:
                text, finish, generated = await inbox.get()
                if finish is None:
                    yield Chunk(text=text)
                    continue
                if finish == "error":
                    raise BackendError(f"the embedded engine failed while generating on '{self.name}'")
                usage = Usage(prompt_tokens=len(prompt), completion_tokens=generated)
                yield Chunk(text=text, finish_reason=finish, usage=usage)
                return
        finally:
            seq.cancel_requested = True

    async def _score(self, request: GenerateRequest) -> Completion:
        """``echo`` with ``max_tokens`` 0 or 1: the prompt back (plus the greedy next token),
        with every token's logprob when asked (lm-evaluation-harness's loglikelihood request)."""
        extra = dict(request.extra)
        extra.pop("echo")
        top = extra.pop("logprobs", None)
        check_extra(extra, "the embedded engine")
        new_tokens = request.params.max_tokens
        if new_tokens not in (0, 1) or (new_tokens == 1 and not request.params.greedy):
            raise ClientError(
                "echo is supported by the embedded engine with max_tokens 0 (score the prompt) or 1 "
                "at temperature 0 (score it and add the greedy next token)",
                param="max_tokens",
                code="unsupported_value",
            )
        valid = isinstance(top, int) and not isinstance(top, bool) and 0 <= top <= MAX_LOGPROBS
        if top is not None and not valid:
            raise ClientError(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}", param="logprobs")
        model = self._loaded()
        ids = self.encode_prompt(request)
        self._max_new_tokens(request, len(ids))  # the context-length check
        prompt = request.prompt or ""
        usage = Usage(prompt_tokens=len(ids), completion_tokens=new_tokens)
        if top is None and new_tokens == 0:
            return Completion(prompt, "length", usage)
        logits = await asyncio.to_thread(model.prompt_logits, ids)
        scored = ids[1:].tolist()
        if new_tokens == 1:
            scored.append(int(np.argmax(logits[-1])))
        else:
            logits = logits[:-1]
        text = prompt + (model.decode_token(scored[-1]) if new_tokens else "")
        block = prompt_logprobs(logits, scored, top or 0, model.decode_token) if top is not None else None
        return Completion(text, "length", usage, logprobs=block)

    async def complete(self, request: GenerateRequest) -> Completion:
        if request.kind == "completion" and request.extra.get("echo") is True:
            return await self._score(request)
        parts: list[str] = []
        async for chunk in self.stream(request):
            parts.append(chunk.text)
            if chunk.finish_reason is not None:
                return Completion("".join(parts), chunk.finish_reason, chunk.usage or Usage())
        raise BackendError(f"the embedded engine ended without a finish on '{self.name}'")
