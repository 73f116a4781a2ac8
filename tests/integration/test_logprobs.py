"""Logprobs through the API on the embedded engine: prompt scoring, generation, chat, streaming.

``/v1/completions`` with ``echo`` + ``logprobs`` (the request lm-evaluation-harness and
``turnout eval`` use to score text; ``max_tokens`` 0 or more), generation logprobs without
echo, token-id and batched prompts, and ``/v1/chat/completions`` with ``logprobs`` /
``top_logprobs``, streamed and not. Values are checked against an independent forward pass of
the same model's Hugging Face folder in transformers, and read back with the official client.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from deploy.model.artifacts import hf_dir

MODEL = "turnout-tiny"
SUM = [{"role": "user", "content": "12+34="}]


def post(base: str, path: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base}/v1/{path}", json={"model": MODEL, **body}, timeout=30)


def score(base: str, prompt: Any, top: int = 1, **extra: Any) -> httpx.Response:
    return post(base, "completions", prompt=prompt, max_tokens=0, echo=True, logprobs=top, **extra)


def streamed(base: str, path: str, **body: Any) -> list[dict[str, Any]]:
    """The stream's choices, one per event, [DONE] excluded."""
    choices = []
    with httpx.stream("POST", f"{base}/v1/{path}", json={"model": MODEL, "stream": True, **body}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                choices.extend(json.loads(line[6:])["choices"])
    return choices


def test_the_right_sum_is_far_likelier_than_a_wrong_one(gateway_url: str) -> None:
    right = score(gateway_url, "12+34=640").json()["choices"][0]
    wrong = score(gateway_url, "12+34=641").json()["choices"][0]
    assert right["text"] == "12+34=640" and right["finish_reason"] == "length"
    block = right["logprobs"]
    assert block["tokens"] == list("12+34=640") and block["token_logprobs"][0] is None
    assert block["text_offset"] == list(range(9)) and block["top_logprobs"][0] is None
    assert sum(block["token_logprobs"][-3:]) > -0.01
    assert wrong["logprobs"]["token_logprobs"][-1] < -5
    assert max(block["top_logprobs"][6], key=block["top_logprobs"][6].get) == "6"


def test_lm_eval_harness_request_scores_the_prompt_and_adds_the_greedy_token(gateway_url: str) -> None:
    """``echo``, ``logprobs: 1``, ``max_tokens: 1``, as text and as token ids (its default)."""
    text = post(
        gateway_url, "completions", prompt="12+34=640", max_tokens=1, echo=True, logprobs=1, temperature=0
    )
    choice = text.json()["choices"][0]
    block = choice["logprobs"]
    assert block["tokens"] == [*"12+34=640", "</s>"] and choice["text"] == "12+34=640"
    assert choice["finish_reason"] == "stop" and block["token_logprobs"][-1] > -0.01
    ids = [1, 22, 23, 16, 24, 25, 34, 27, 25, 21]  # <s>12+34=640, as lm-eval sends them: [[...]]
    reply = post(gateway_url, "completions", prompt=[ids], max_tokens=1, echo=True, logprobs=1, temperature=0)
    by_ids = reply.json()["choices"][0]
    assert by_ids["text"] == "<s>12+34=640" and by_ids["logprobs"]["tokens"][:2] == ["<s>", "1"]
    # Sent with its BOS, the first digit is scored too; the rest are the text prompt's values.
    assert by_ids["logprobs"]["token_logprobs"][0] is None and by_ids["logprobs"]["token_logprobs"][1] < 0
    assert by_ids["logprobs"]["token_logprobs"][2:] == pytest.approx(block["token_logprobs"][1:], abs=1e-5)


def test_logprobs_match_an_independent_forward_pass(gateway_url: str) -> None:
    """The prompt pass (echo) and the decode steps (generation) against transformers."""
    torch = pytest.importorskip("torch", reason="needs the recipe's torch: pip install 'turnout[model]'")
    transformers = pytest.importorskip("transformers", reason="pip install 'turnout[model]'")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir()))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir())).eval()
    prompt = "the red cat sees"
    generated = post(gateway_url, "completions", prompt=prompt, max_tokens=6, logprobs=0, temperature=0)
    continuation = generated.json()["choices"][0]["logprobs"]
    text = prompt + "".join(t for t in continuation["tokens"] if t != "</s>")
    ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    with torch.no_grad():
        reference = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    expected = [float(reference[j][ids[j + 1]]) for j in range(1, len(ids) - 1)]
    served = score(gateway_url, text, top=0).json()["choices"][0]["logprobs"]["token_logprobs"][1:]
    assert served == pytest.approx(expected, abs=1e-3)
    steps = len(ids) - len(tokenizer(prompt)["input_ids"])  # the generated tokens (EOS aside)
    assert continuation["token_logprobs"][:steps] == pytest.approx(expected[-steps:], abs=1e-3)


def test_sampling_does_not_change_the_logprobs(gateway_url: str) -> None:
    """A sampled token's logprob is the raw model's (temperature only changes which token is drawn)."""
    hot = post(
        gateway_url, "completions", prompt="the red cat", max_tokens=5, logprobs=0, temperature=1.8, seed=5
    )
    block = hot.json()["choices"][0]["logprobs"]
    tokens = [t for t in block["tokens"] if t != "</s>"]
    rescored = score(gateway_url, "the red cat" + "".join(tokens), top=0).json()["choices"][0]["logprobs"]
    assert rescored["tokens"][-len(tokens) :] == tokens
    assert rescored["token_logprobs"][-len(tokens) :] == pytest.approx(
        block["token_logprobs"][: len(tokens)], abs=1e-4
    )


def test_chat_greedy_tokens_are_their_own_top_choice_streamed_or_not(gateway_url: str) -> None:
    body = {"messages": SUM, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    reply = post(gateway_url, "chat/completions", **body).json()["choices"][0]
    content = reply["logprobs"]["content"]
    assert [entry["token"] for entry in content] == ["6", "4", "0", "</s>"] and reply["message"][
        "content"
    ] == "640"
    for entry in content:
        best = entry["top_logprobs"][0]
        assert len(entry["top_logprobs"]) == 3 and best["token"] == entry["token"]
        assert best["logprob"] == entry["logprob"] and bytes(entry["bytes"]).decode() == entry["token"]
    choices = streamed(gateway_url, "chat/completions", **body)
    pieces = [c["logprobs"]["content"] for c in choices if c["logprobs"]]
    assert [entry for piece in pieces for entry in piece] == content
    assert all(len(piece) == 1 for piece in pieces)  # each token on the event with its text
    plain = post(gateway_url, "chat/completions", messages=SUM, max_tokens=4, temperature=0).json()
    assert plain["choices"][0]["logprobs"] is None


def test_echo_with_generation_streams_the_prompt_first(gateway_url: str) -> None:
    body = {"prompt": "03+45=", "max_tokens": 4, "temperature": 0, "echo": True, "logprobs": 2}
    whole = post(gateway_url, "completions", **body).json()["choices"][0]
    assert whole["text"] == "03+45=840" and whole["logprobs"]["tokens"] == [*"03+45=840", "</s>"]
    assert whole["logprobs"]["text_offset"] == list(range(10))
    choices = streamed(gateway_url, "completions", **body)
    assert choices[0]["text"].startswith("03+45=") and "".join(c["text"] for c in choices) == whole["text"]
    joined: dict[str, list[Any]] = {}
    for choice in choices:
        for key, values in (choice["logprobs"] or {}).items():
            joined.setdefault(key, []).extend(values)
    assert joined == whole["logprobs"]


def test_a_batch_of_prompts_answers_one_choice_each(gateway_url: str) -> None:
    """Prompts of different lengths decoded together (right-padded in one engine batch) score
    as each does alone in the prompt-only pass."""
    prompts = ["12+34=", "the red cat sees a big", "07+05="]
    body = {"prompt": prompts, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
    reply = post(gateway_url, "completions", **body).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert [c["text"] for c in reply["choices"][::2]] == ["12+34=6", "07+05=2"]
    prompt_tokens = 0
    for prompt, choice in zip(prompts, reply["choices"], strict=True):
        alone = score(gateway_url, prompt).json()["choices"][0]["logprobs"]
        together = choice["logprobs"]
        assert choice["text"].startswith(prompt) and together["tokens"][:-1] == alone["tokens"]
        assert together["token_logprobs"][1:-1] == pytest.approx(alone["token_logprobs"][1:], abs=1e-4)
        prompt_tokens += len(alone["tokens"]) + 1  # and the BOS
    assert reply["usage"]["prompt_tokens"] == prompt_tokens


def test_the_openai_client_reads_the_logprobs(gateway_url: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x", max_retries=0)
    reply = client.completions.create(model=MODEL, prompt="03+45=840", max_tokens=0, echo=True, logprobs=1)
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None and logprobs.top_logprobs is not None
    assert logprobs.tokens == list("03+45=840") and logprobs.token_logprobs[0] is None
    chat = client.chat.completions.create(
        model=MODEL,
        messages=SUM,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = chat.choices[0].logprobs and chat.choices[0].logprobs.content
    assert content and content[0].token == "6" and content[0].top_logprobs[0].token == "6"
    stream = client.chat.completions.create(
        model=MODEL,
        messages=SUM,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        stream=True,
    )
    tokens = [
        e.token
        for c in stream
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content or []
    ]
    assert tokens == ["6", "4", "0", "</s>"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("completions", {"prompt": "1", "logprobs": 9}, "logprobs"),
        ("completions", {"prompt": "1", "logprobs": True}, "logprobs"),
        ("completions", {"prompt": "1", "echo": "yes"}, "echo"),
        ("completions", {"prompt": "1", "max_tokens": 0, "echo": False}, "max_tokens"),
        ("completions", {"prompt": [1, 999]}, "prompt"),
        ("completions", {"prompt": ["1", "2"], "stream": True}, "prompt"),
        ("chat/completions", {"messages": SUM, "top_logprobs": 2}, "top_logprobs"),
        ("chat/completions", {"messages": SUM, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat/completions", {"messages": SUM, "logprobs": 1}, "logprobs"),
    ],
)
def test_bad_logprob_requests_are_400s_naming_the_field(
    gateway_url: str, path: str, body: dict[str, Any], param: str
) -> None:
    reply = post(gateway_url, path, **body)
    assert reply.status_code == 400, reply.text
    assert (
        reply.json()["error"]["param"] == param and reply.json()["error"]["type"] == "invalid_request_error"
    )
