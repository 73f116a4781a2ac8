"""The shipped fp32 model answers held-out sums through the API (≥ 95% of 200 exact).

Also the check that dynamic batching (right padding) does not change greedy answers:
the same prompts sent concurrently and one by one must agree token for token.
"""

from __future__ import annotations

import asyncio

import httpx

from deploy.model.tasks import addition_answer, addition_prompt, heldout_pairs


async def _ask_all(base: str, prompts: list[str], chat: bool, concurrency: int) -> list[str]:
    limit = asyncio.Semaphore(concurrency)

    async def ask(client: httpx.AsyncClient, prompt: str) -> str:
        async with limit:
            if chat:
                body = {
                    "model": "turnout-tiny",
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 6,
                    "temperature": 0,
                }
                reply = await client.post(f"{base}/v1/chat/completions", json=body)
                reply.raise_for_status()
                return str(reply.json()["choices"][0]["message"]["content"])
            body = {"model": "turnout-tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0}
            reply = await client.post(f"{base}/v1/completions", json=body)
            reply.raise_for_status()
            return str(reply.json()["choices"][0]["text"])

    async with httpx.AsyncClient(timeout=60) as client:
        return await asyncio.gather(*(ask(client, p) for p in prompts))


def _accuracy(answers: list[str]) -> float:
    pairs = heldout_pairs()
    right = sum(answer == addition_answer(a, b) for answer, (a, b) in zip(answers, pairs, strict=True))
    return right / len(pairs)


def test_heldout_sums_through_completions(gateway_url: str) -> None:
    prompts = [addition_prompt(a, b) for a, b in heldout_pairs()]
    assert len(prompts) == 200
    accuracy = _accuracy(asyncio.run(_ask_all(gateway_url, prompts, chat=False, concurrency=16)))
    assert accuracy >= 0.95, f"held-out exact match {accuracy:.1%}"


def test_heldout_sums_through_chat(gateway_url: str) -> None:
    prompts = [addition_prompt(a, b) for a, b in heldout_pairs()]
    accuracy = _accuracy(asyncio.run(_ask_all(gateway_url, prompts, chat=True, concurrency=16)))
    assert accuracy >= 0.95, f"held-out exact match {accuracy:.1%}"


def test_batched_answers_equal_one_by_one(gateway_url: str) -> None:
    # Prompts of different lengths, so right padding is exercised inside a batch.
    prompts = ["the", "12+34=", "anna sees the red", "5", "the big dog likes", "07+70=", "a", "the cat"] * 2
    together = asyncio.run(_ask_all(gateway_url, prompts, chat=False, concurrency=16))
    alone = asyncio.run(_ask_all(gateway_url, prompts, chat=False, concurrency=1))
    assert together == alone
