"""Benchmark: what asking for logprobs costs the embedded engine's decode loop (prints figures).

Runs ``GenAIModel.run_batch`` in-process on the shipped fp32 model (no HTTP), greedy with a
fixed length (``ignore_eos``), at batch 1 and 16: plain sequences (the normal path, which
never looks at the logits) against :class:`ScoredSequence` rows asking for the sampled
token's logprob only (``top 0``) and for 5 alternatives. Rounds are interleaved and the
median is printed, so background load hits all columns alike; figures are still only as
quiet as the machine (the load average is printed).

    python bench/logprobs_overhead.py [--tokens 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from backends.base import SamplingParams
from backends.ortgenai_runner import Event, GenAIModel, ScoredSequence, Sequence
from deploy.model.artifacts import onnx_dir


def tokens_per_s(
    model: GenAIModel, loop: asyncio.AbstractEventLoop, batch: int, tokens: int, top: int | None
) -> float:
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    ignore: Callable[[Event], None] = lambda event: None  # noqa: E731
    rows: list[Sequence] = []
    for i in range(batch):
        ids = np.concatenate([[model.bos_id], model.encode(f"{i:02d}+{(7 * i) % 100:02d}=")]).astype(np.int32)
        if top is None:
            rows.append(Sequence(ids, params, tokens, loop, ignore))
        else:
            rows.append(ScoredSequence(ids, params, tokens, loop, ignore, top=top))
    started = time.perf_counter()
    model.run_batch(rows)
    elapsed = time.perf_counter() - started
    loop.run_until_complete(asyncio.sleep(0))  # drain the delivered events
    return batch * tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per cell")
    args = parser.parse_args()
    model = GenAIModel(onnx_dir("fp32"))
    loop = asyncio.new_event_loop()
    columns: dict[str, int | None] = {"off": None, "top 0": 0, "top 5": 5}
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}; fp32, {args.tokens} tokens per sequence, median of {args.rounds}")
    print(f"{'batch':>5}  " + "  ".join(f"{name:>8}" for name in columns) + "   tokens/s (logprobs off / on)")
    for batch in (1, 16):
        samples: dict[str, list[float]] = {name: [] for name in columns}
        for _ in range(args.rounds):
            for name, top in columns.items():
                samples[name].append(tokens_per_s(model, loop, batch, args.tokens, top))
        medians = {name: statistics.median(values) for name, values in samples.items()}
        ratio = medians["top 5"] / medians["off"]
        print(
            f"{batch:>5}  "
            + "  ".join(f"{medians[name]:>8.0f}" for name in columns)
            + f"   top 5 / off = {ratio:.2f}"
        )
    loop.close()


if __name__ == "__main__":
    main()
