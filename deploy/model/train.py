"""Train the tiny Llama-architecture model on the task mix with a plain, deterministic torch loop.

Called by ``deploy.model.recipe``; the result goes to ``deploy.model.export``. Determinism comes
from fixed seeds, ``torch.use_deterministic_algorithms(True)``, a fixed thread count and a data
stream that depends only on the seed. Every document is a right-padded row (no attention mask
needed: a causal model never looks at the pads that follow the real tokens). The loss weights
each document's answer part by ``answer_weight`` (for other text that is the whole sentence)
and its prompt by ``prompt_weight``: 0 by default, since random operand digits cannot be
predicted and their gradient only delayed learning the sums.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from deploy.model import tasks
from deploy.model.tokenizer import MODEL_MAX_LENGTH, special_token_ids

TRAIN_THREADS = 2


@dataclass(frozen=True)
class TrainSettings:
    """Hyper-parameters of one training run."""

    steps: int
    batch_size: int = 96
    learning_rate: float = 5e-3
    min_learning_rate: float = 2e-4
    warmup_steps: int = 60
    weight_decay: float = 0.1
    answer_weight: float = 1.0
    prompt_weight: float = 0.0
    text_share: float = 0.3
    hidden_size: int = 128
    intermediate_size: int = 320
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    report_every: int = 100


FULL_SETTINGS = TrainSettings(steps=1600)
QUICK_SETTINGS = TrainSettings(steps=8, warmup_steps=2)


@dataclass(frozen=True)
class TrainResult:
    model: LlamaForCausalLM
    steps: int
    parameters: int
    final_loss: float
    seconds: float


def make_deterministic(seed: int) -> None:
    """Seed torch and pin the algorithms and thread count so a run is repeatable."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(TRAIN_THREADS)


def model_config(tokenizer: Tokenizer, settings: TrainSettings) -> LlamaConfig:
    ids = special_token_ids(tokenizer)
    return LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.layers,
        num_attention_heads=settings.heads,
        num_key_value_heads=settings.kv_heads,
        max_position_embeddings=MODEL_MAX_LENGTH,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
    )


def encode_documents(
    tokenizer: Tokenizer, documents: list[tasks.Document], settings: TrainSettings
) -> list[tuple[list[int], list[float]]]:
    """Token ids and per-token loss weights (for predicting that token) of each document."""
    prompts = tokenizer.encode_batch([doc.prompt for doc in documents], add_special_tokens=False)
    answers = tokenizer.encode_batch([doc.answer for doc in documents], add_special_tokens=False)
    encoded = []
    for prompt, answer in zip(prompts, answers, strict=True):
        ids = prompt.ids + answer.ids
        weights = [settings.prompt_weight] * len(prompt.ids) + [settings.answer_weight] * len(answer.ids)
        encoded.append((ids, weights))
    return encoded


def collate(rows: list[tuple[list[int], list[float]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a batch: returns input ids [B, T] and the weights of predicting ids[:, 1:]."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    weights = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for row, (ids, token_weights) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        weights[row, : len(ids) - 1] = torch.tensor(token_weights[1:])
    return input_ids, weights


def learning_rate_at(step: int, settings: TrainSettings) -> float:
    """Linear warm-up then cosine decay to ``min_learning_rate``."""
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return settings.min_learning_rate + (settings.learning_rate - settings.min_learning_rate) * cosine


def weighted_loss(logits: torch.Tensor, input_ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1), reduction="none"
    )
    flat_weights = weights.reshape(-1)
    return (per_token * flat_weights).sum() / flat_weights.sum()


def train(
    tokenizer: Tokenizer,
    settings: TrainSettings,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train a fresh model for ``settings.steps`` steps on documents drawn from ``seed``."""
    make_deterministic(seed)
    model = LlamaForCausalLM(model_config(tokenizer, settings))
    model.train()
    parameters = sum(p.numel() for p in model.parameters())
    documents = tasks.training_documents(seed, settings.steps * settings.batch_size, settings.text_share)
    rows = encode_documents(tokenizer, documents, settings)
    pad_id = special_token_ids(tokenizer)["pad"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.learning_rate,
        betas=(0.9, 0.98),
    )
    log(f"training {parameters:,} parameters for {settings.steps} steps of {settings.batch_size}")
    started = time.perf_counter()
    running_loss = 0.0
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, settings)
        batch = rows[step * settings.batch_size : (step + 1) * settings.batch_size]
        input_ids, weights = collate(batch, pad_id)
        logits = model(input_ids=input_ids).logits
        loss = weighted_loss(logits, input_ids, weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running_loss = loss.item() if step == 0 else 0.98 * running_loss + 0.02 * loss.item()
        if (step + 1) % settings.report_every == 0 or step + 1 == settings.steps:
            model.eval()  # type: ignore[no-untyped-call]
            accuracy = greedy_addition_accuracy(model, tokenizer, chat=False)
            model.train()
            elapsed = time.perf_counter() - started
            progress = f"step {step + 1}/{settings.steps} loss {running_loss:.4f}"
            log(f"{progress} held-out sums {accuracy:.1%} {elapsed:.0f}s")
    model.eval()  # type: ignore[no-untyped-call]
    seconds = time.perf_counter() - started
    return TrainResult(model, settings.steps, parameters, running_loss, seconds)


@torch.no_grad()
def greedy_addition_accuracy(
    model: LlamaForCausalLM, tokenizer: Tokenizer, chat: bool, system: str | None = None
) -> float:
    """Exact-match share of the held-out sums with torch greedy decoding (a quick in-training check).

    Zero-padded operands make every prompt the same length, so the whole set is one batch.
    """
    pairs = tasks.heldout_pairs()
    if chat:
        prompts = [tasks.chat_document(a, b, system).prompt for a, b in pairs]
    else:
        prompts = [tasks.completion_document(a, b).prompt for a, b in pairs]
    input_ids = torch.tensor([e.ids for e in tokenizer.encode_batch(prompts, add_special_tokens=False)])
    for _ in range(4):
        next_ids = model(input_ids=input_ids).logits[:, -1].argmax(-1, keepdim=True)
        input_ids = torch.cat([input_ids, next_ids], dim=1)
    generated = tokenizer.decode_batch(input_ids[:, -4:].tolist(), skip_special_tokens=False)
    correct = sum(
        tasks.decode_addition_answer(text) == a + b and text.endswith(tasks.EOS_TOKEN)
        for text, (a, b) in zip(generated, pairs, strict=True)
    )
    return correct / len(pairs)
