"""The official ``openai`` client works unchanged against the gateway (embedded default)."""

from __future__ import annotations

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="anything", max_retries=0)


def test_models_list(client: openai.OpenAI) -> None:
    names = {m.id for m in client.models.list()}
    assert names == {"turnout-tiny", "turnout-tiny-int8", "turnout-tiny-int4"}
    assert client.models.retrieve("turnout-tiny").id == "turnout-tiny"


def test_chat_completion(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="turnout-tiny", messages=[{"role": "user", "content": "12+34="}], max_tokens=8, temperature=0
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "640"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 4  # 6 4 0 </s>: the end token counts, as in vLLM
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 4
    assert reply.model == "turnout-tiny"


def test_chat_completion_stream_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="turnout-tiny",
        messages=[{"role": "user", "content": "12+34="}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == ["6", "4", "0"]  # one token per chunk
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_completion(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="turnout-tiny", prompt="12+34=", max_tokens=8)
    assert reply.choices[0].text == "640"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == 4


def test_completion_stream(client: openai.OpenAI) -> None:
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(model="turnout-tiny", prompt="12+34=", max_tokens=8, stream=True)
    )
    assert text == "640"


def test_max_tokens_gives_length(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="turnout-tiny", prompt="12+34=", max_tokens=2)
    assert reply.choices[0].text == "64"
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 2


def test_stop_sequence_is_cut_and_not_emitted(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="turnout-tiny", prompt="12+34=", max_tokens=8, stop=["4", "9"])
    assert reply.choices[0].text == "6"
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.choices[0].model_extra or {}).get("stop_reason") == "4"  # vLLM's extension


def test_stop_reason_names_the_stop_sequence_only(client: openai.OpenAI) -> None:
    """As vLLM: the stop string that ended the answer, on its last choice or chunk; absent when the
    end token or max_tokens ended it."""
    messages = [{"role": "user", "content": "12+34="}]
    chat = client.chat.completions.create(model="turnout-tiny", messages=messages, max_tokens=8, stop=["0"])
    assert (chat.choices[0].message.content, chat.choices[0].model_extra) == ("64", {"stop_reason": "0"})
    stream = client.chat.completions.create(
        model="turnout-tiny", messages=messages, max_tokens=8, stop=["0"], stream=True
    )
    finishing = [c.choices[0] for c in stream if c.choices and c.choices[0].finish_reason]
    assert [(c.finish_reason, (c.model_extra or {}).get("stop_reason")) for c in finishing] == [("stop", "0")]
    eos = client.chat.completions.create(model="turnout-tiny", messages=messages, max_tokens=8)
    assert eos.choices[0].finish_reason == "stop" and "stop_reason" not in (eos.choices[0].model_extra or {})


@pytest.mark.parametrize("model", ["turnout-tiny-int8", "turnout-tiny-int4"])
def test_quantized_variants_answer(client: openai.OpenAI, model: str) -> None:
    reply = client.completions.create(model=model, prompt="12+34=", max_tokens=8)
    assert reply.choices[0].text.isdigit()


def test_seeded_sampling_is_reproducible(client: openai.OpenAI) -> None:
    def sample() -> str:
        reply = client.completions.create(
            model="turnout-tiny", prompt="the", max_tokens=24, temperature=1.0, top_p=0.95, seed=7
        )
        return reply.choices[0].text

    assert sample() == sample()


def test_unseeded_sampling_differs_between_requests(client: openai.OpenAI) -> None:
    """No seed: each request's generator gets a fresh one (the binding draws it)."""
    texts = {
        client.completions.create(model="turnout-tiny", prompt="the", max_tokens=24, temperature=1.0)
        .choices[0]
        .text
        for _ in range(4)
    }
    assert len(texts) > 1, texts


def test_any_int64_seed_and_a_top_k_past_the_vocabulary_sample(gateway_url: str) -> None:
    """The engine's own seed is an int32 and its top_k at most the vocabulary (512): a client's
    64-bit seed or a larger top_k is folded or clamped, never an engine failure (once a 502
    that counted towards the variant's circuit breaker)."""

    def text(**sampling: object) -> str:
        body = {"model": "turnout-tiny", "prompt": "the", "max_tokens": 12, "temperature": 1.0, **sampling}
        reply = httpx.post(f"{gateway_url}/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["text"])

    for seed in (2**31, 2**63 - 1, -(2**63), -1):
        assert text(seed=seed) == text(seed=seed)
    assert text(seed=2**31 + 7) == text(seed=7)  # folded into the int32 range, reproducibly
    assert text(top_k=600, seed=3) == text(top_k=0, seed=3)  # every token, like vLLM


def test_an_unset_top_k_means_every_token_and_top_p_alone_samples(gateway_url: str) -> None:
    """The library's own default top_k (50) applied whenever a request set none (or -1/0); and
    top_p or top_k without a temperature was greedy, as the model's default is."""

    def text(**sampling: object) -> str:
        body = {"model": "turnout-tiny", "prompt": "", "max_tokens": 60, **sampling}
        reply = httpx.post(f"{gateway_url}/v1/completions", json=body)
        assert reply.status_code == 200, reply.text
        return str(reply.json()["choices"][0]["text"])

    differs_from_top_50 = 0
    for seed in range(1, 6):
        every = text(temperature=2.0, seed=seed, top_k=512)
        assert text(temperature=2.0, seed=seed) == every
        assert text(temperature=2.0, seed=seed, top_k=-1) == every
        differs_from_top_50 += text(temperature=2.0, seed=seed, top_k=50) != every
    assert differs_from_top_50 >= 1
    greedy = text()
    assert text(top_p=0.9, seed=5) == text(top_p=0.9, temperature=1.0, seed=5) != greedy
    assert text(top_k=100, seed=5) == text(top_k=100, temperature=1.0, seed=5) != greedy


def test_a_nul_character_does_not_cut_the_prompt_short(client: openai.OpenAI) -> None:
    """The engine's tokenizer reads C strings: everything after a NUL was dropped, in chat the
    template's own turn markers and every later message with it."""

    def prompt_tokens(*contents: str) -> int:
        messages = [{"role": "user", "content": content} for content in contents]
        reply = client.chat.completions.create(model="turnout-tiny", messages=messages, max_tokens=1)  # type: ignore[arg-type]
        assert reply.usage is not None
        return reply.usage.prompt_tokens

    assert prompt_tokens("12+34=\x00") == prompt_tokens("12+34=") + 1
    assert prompt_tokens("\x00", "12+34=") == prompt_tokens("", "12+34=") + 1


def test_a_prompt_with_more_nuls_than_the_context_is_refused_before_it_is_encoded(gateway_url: str) -> None:
    """Each NUL-separated part is a library call: a megabyte of "a\\x00" kept the event loop (every
    other request) for about a second before the context check refused it."""
    body = {"model": "turnout-tiny", "prompt": "a\x00" * 145_000, "max_tokens": 1}
    reply = httpx.post(f"{gateway_url}/v1/completions", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert "holds 145000 NUL characters" in error["message"]


def test_explicit_nulls_mean_the_defaults(gateway_url: str) -> None:
    """OpenAI's schema allows null for ``stream`` and ``include_usage``; some clients send it."""
    body = {"model": "turnout-tiny", "prompt": "12+34=", "max_tokens": 4, "stream": None}
    reply = httpx.post(f"{gateway_url}/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] == "640"
    streamed = {**body, "stream": True, "stream_options": {"include_usage": None}}
    reply = httpx.post(f"{gateway_url}/v1/completions", json=streamed)
    assert reply.status_code == 200, reply.text
    assert '"usage":{' not in reply.text.replace(" ", "")  # null = false: no usage chunk


def test_top_k_one_samples_the_greedy_answer(client: openai.OpenAI) -> None:
    def text(**sampling: object) -> str:
        reply = client.completions.create(
            model="turnout-tiny", prompt="anna sees", max_tokens=24, extra_body=sampling
        )
        return reply.choices[0].text

    greedy = text(temperature=0)
    assert text(temperature=1.5, top_k=1) == greedy
    assert len({text(temperature=1.5, top_p=1.0) for _ in range(3)}) > 1  # it really samples


def test_headers(gateway_url: str) -> None:
    body = {"model": "turnout-tiny", "prompt": "12+34=", "max_tokens": 4}
    reply = httpx.post(f"{gateway_url}/v1/completions", json=body, headers={"x-request-id": "abc123"})
    assert reply.headers["x-request-id"] == "abc123"
    assert reply.headers["x-turnout-variant"] == "turnout-tiny"
    assert reply.headers["x-turnout-route-version"] == "1"
    assert reply.json()["id"] == "cmpl-abc123"
    generated = httpx.post(f"{gateway_url}/v1/completions", json=body)
    assert len(generated.headers["x-request-id"]) == 32
    too_long = httpx.post(f"{gateway_url}/v1/completions", json=body, headers={"x-request-id": "a" * 129})
    assert len(too_long.headers["x-request-id"]) == 32  # not echoed: a new one


def test_health_and_ready(gateway_url: str) -> None:
    assert httpx.get(f"{gateway_url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{gateway_url}/ready").json() == {"status": "ready"}
