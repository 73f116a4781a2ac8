"""The deterministic recipe behind ``turnout model build``: tokenizer → training → export → evaluation.

Deterministic on one kind of CPU: two builds there are byte-identical, but torch's float kernels
differ by instruction set, so training elsewhere lands on a different model (``build_info.json``
records the CPU). The export alone is the same everywhere.

``build(out_dir)`` writes ``<out_dir>/turnout-tiny/{hf,fp32,int8,int4}/`` plus ``build_info.json``
(the layout ``deploy.model.artifacts`` reads). It builds into a staging folder and swaps it in
only when everything succeeded, so a failed build never leaves the shipped model half-written.
The evaluation runs the exported ONNX models through ``onnxruntime_genai`` exactly as serving
will: exact-match accuracy on the 200 held-out sums (completion and chat, greedy) and, on the
held-out text, int8/int4 top-1 agreement with fp32 (teacher-forced) and fp32 perplexity.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og
import torch

from deploy.model import artifacts, tasks
from deploy.model.export import build_onnx, save_hf_folder
from deploy.model.tokenizer import train_tokenizer
from deploy.model.train import FULL_SETTINGS, QUICK_SETTINGS, greedy_addition_accuracy, train

GENERATION_BATCH = 32


@dataclass(frozen=True)
class Continuation:
    """Greedily generated tokens, without the end-of-sequence token; ``stopped``: eos was produced."""

    tokens: list[int]
    stopped: bool


def generate_greedy(
    model: og.Model, prompts: Sequence[Sequence[int]], new_tokens: int, pad_id: int
) -> list[Continuation]:
    """Greedy continuations (at most ``new_tokens``) of token-id prompts.

    Prompts of different lengths share one generator: right-padded with ``pad_id`` into a 2-D
    int32 array (genai_config's pad_token_id tells the runtime which positions to mask). Each
    row's sequence is then ``prompt + pads + generated``. A batch of one ends without its eos
    (the sequence is just shorter than the limit); in a larger batch a finished row holds its
    eos followed by ``pad_id`` fill.
    """
    eos_ids = {int(i) for i in og.Tokenizer(model).eos_token_ids}
    continuations: list[Continuation] = []
    for start in range(0, len(prompts), GENERATION_BATCH):
        chunk = prompts[start : start + GENERATION_BATCH]
        width = max(len(p) for p in chunk)
        batch = np.full((len(chunk), width), pad_id, dtype=np.int32)
        for row, prompt in enumerate(chunk):
            batch[row, : len(prompt)] = prompt
        params = og.GeneratorParams(model)
        # A fixed seed (greedy never draws): unseeded, the library seeds each generator from
        # std::random_device, ~0.6 ms of rdseed retries on these VMs (backends/ortgenai_capi.py).
        params.set_search_options(
            do_sample=False, max_length=width + new_tokens, batch_size=len(chunk), random_seed=0
        )
        generator = og.Generator(model, params)
        generator.append_tokens(batch)
        while not generator.is_done():
            generator.generate_next_token()
        for row in range(len(chunk)):
            tokens = [int(t) for t in generator.get_sequence(row)[width:]]
            ends = [i for i, t in enumerate(tokens) if t in eos_ids]
            if ends:
                continuations.append(Continuation(tokens[: ends[0]], stopped=True))
            else:
                continuations.append(Continuation(tokens, stopped=len(tokens) < new_tokens))
    return continuations


def addition_accuracy(folder: Path, chat: bool, system: str | None = None) -> float:
    """Exact-match share of the held-out sums (answer digits, then eos) with greedy decoding."""
    model = og.Model(str(folder))
    tokenizer = og.Tokenizer(model)
    pairs = tasks.heldout_pairs()
    documents = [
        tasks.chat_document(a, b, system) if chat else tasks.completion_document(a, b) for a, b in pairs
    ]
    prompts = [[int(t) for t in tokenizer.encode(doc.prompt)] for doc in documents]
    answers = [[int(t) for t in tokenizer.encode(tasks.addition_answer(a, b))] for a, b in pairs]
    outputs = generate_greedy(model, prompts, new_tokens=6, pad_id=int(tokenizer.pad_token_id))
    correct = sum(out.stopped and out.tokens == answer for out, answer in zip(outputs, answers, strict=True))
    return correct / len(pairs)


def _text_logits(model: og.Model, token_ids: list[int]) -> np.ndarray[Any, np.dtype[np.float32]]:
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(token_ids) + 1, batch_size=1, random_seed=0)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([token_ids], dtype=np.int32))
    logits: np.ndarray[Any, np.dtype[np.float32]] = generator.get_output("logits")[0]
    return logits


def text_comparison(reference: Path, candidates: Sequence[Path]) -> dict[str, float]:
    """Teacher-forced top-1 agreement of each candidate with ``reference`` on the held-out text.

    Keys: ``perplexity`` (of the reference) and ``agreement_<folder name>`` per candidate.
    """
    reference_model = og.Model(str(reference))
    tokenizer = og.Tokenizer(reference_model)
    bos, eos = tasks.BOS_TOKEN, tasks.EOS_TOKEN
    texts = [[int(t) for t in tokenizer.encode(bos + line + eos)] for line in tasks.heldout_text()]
    reference_logits = [_text_logits(reference_model, ids) for ids in texts]
    negative_log_likelihood, predicted = 0.0, 0
    for ids, logits in zip(texts, reference_logits, strict=True):
        shifted = logits[:-1].astype(np.float64)
        log_norm = np.log(np.exp(shifted - shifted.max(-1, keepdims=True)).sum(-1)) + shifted.max(-1)
        negative_log_likelihood += float((log_norm - shifted[np.arange(len(ids) - 1), ids[1:]]).sum())
        predicted += len(ids) - 1
    result = {"perplexity": math.exp(negative_log_likelihood / predicted)}
    for folder in candidates:
        model = og.Model(str(folder))
        # Positions 0..n-2 predict real tokens; the one after the final eos is never trained.
        agree = sum(
            int((_text_logits(model, ids)[:-1].argmax(-1) == ref[:-1].argmax(-1)).sum())
            for ids, ref in zip(texts, reference_logits, strict=True)
        )
        result[f"agreement_{folder.name}"] = agree / predicted
    return result


def evaluate(model_root: Path) -> dict[str, float]:
    """All ONNX figures of a built model folder (``<out>/turnout-tiny``)."""
    figures: dict[str, float] = {}
    for precision in artifacts.PRECISIONS:
        folder = model_root / precision
        figures[f"{precision}_addition_completion"] = addition_accuracy(folder, chat=False)
        figures[f"{precision}_addition_chat"] = addition_accuracy(folder, chat=True)
    figures["fp32_addition_chat_system"] = addition_accuracy(
        model_root / "fp32", True, tasks.SYSTEM_PROMPTS[0]
    )
    others = [model_root / p for p in artifacts.PRECISIONS if p != "fp32"]
    for key, value in text_comparison(model_root / "fp32", others).items():
        figures[f"heldout_text_{key}" if key == "perplexity" else key] = value
    return figures


def build(out_dir: Path, quick: bool = False, seed: int = 0) -> None:
    """Train, export and evaluate the model into ``<out_dir>/turnout-tiny`` (replacing it)."""
    final_dir = artifacts.model_dir(out_dir)
    staging = final_dir.with_name(f".{artifacts.MODEL_NAME}.building")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    started = time.perf_counter()
    try:
        figures = _build_into(staging, quick, seed)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if final_dir.exists():
        shutil.rmtree(final_dir)
    staging.rename(final_dir)
    print(_report(figures))
    print(f"built {final_dir} in {time.perf_counter() - started:.0f}s")


def _build_into(model_root: Path, quick: bool, seed: int) -> dict[str, float]:
    settings = QUICK_SETTINGS if quick else FULL_SETTINGS
    tokenizer = train_tokenizer(tasks.tokenizer_corpus(seed))
    result = train(tokenizer, settings, seed)
    torch_figures = {
        "torch_addition_completion": greedy_addition_accuracy(result.model, tokenizer, chat=False),
        "torch_addition_chat": greedy_addition_accuracy(result.model, tokenizer, chat=True),
    }
    print(f"trained in {result.seconds:.0f}s; torch held-out accuracy {torch_figures}")
    hf_folder = model_root / artifacts.HF_FOLDER
    save_hf_folder(result.model, tokenizer, hf_folder)
    for precision in artifacts.PRECISIONS:
        build_onnx(hf_folder, model_root / precision, precision)
        print(f"exported {precision}")
    onnx_figures = evaluate(model_root)
    info = {
        "model": artifacts.MODEL_NAME,
        "seed": seed,
        "quick": quick,
        "steps": result.steps,
        "batch_size": settings.batch_size,
        "parameters": result.parameters,
        "final_train_loss": round(result.final_loss, 4),
        "settings": {k: v for k, v in vars(settings).items() if k != "steps"},
        "figures": {k: round(v, 4) for k, v in {**torch_figures, **onnx_figures}.items()},
        "versions": {
            name: version(name) for name in ("torch", "transformers", "tokenizers", "onnxruntime-genai")
        },
        # Training is repeatable on one kind of CPU only: torch's float kernels differ by
        # instruction set, so a build elsewhere trains (and quantizes) to a different model.
        "cpu": {"machine": platform.machine(), "torch_capability": torch.backends.cpu.get_cpu_capability()},
    }
    (model_root / artifacts.BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return onnx_figures


def _report(figures: dict[str, float]) -> str:
    lines = ["held-out sums, exact match (greedy, onnxruntime-genai):"]
    for precision in artifacts.PRECISIONS:
        completion = figures[f"{precision}_addition_completion"]
        chat = figures[f"{precision}_addition_chat"]
        lines.append(f"  {precision}: completion {completion:.1%}  chat {chat:.1%}")
    lines.append(f"held-out text: fp32 perplexity {figures['heldout_text_perplexity']:.2f}")
    for precision in artifacts.PRECISIONS[1:]:
        lines.append(f"  {precision} top-1 agreement with fp32: {figures[f'agreement_{precision}']:.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="turnout model build",
        description="Re-create the shipped model: tokenizer, training, export (Hugging Face folder, "
        "ONNX fp32/int8/int4) and evaluation. Repeatable byte for byte on the same kind of CPU; on "
        "another, torch's float kernels train to a different model. Needs turnout[model].",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=artifacts.ARTIFACTS_DIR,
        help="artifacts root folder (default: the shipped model's, which the build replaces)",
    )
    parser.add_argument("--quick", action="store_true", help="train a few steps only (pipeline check)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    build(args.out, quick=args.quick, seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
