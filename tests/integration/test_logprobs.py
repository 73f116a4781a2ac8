"""Prompt logprobs (``/v1/completions`` with ``echo`` and ``logprobs``) on the embedded engine.

The request lm-evaluation-harness and ``turnout eval`` use to score text: ``max_tokens: 0``,
the prompt echoed, each token's logprob (the first null). Checked against an independent
forward pass of the same model's Hugging Face folder in transformers.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from deploy.model.artifacts import hf_dir


def score(base: str, prompt: str, top: int = 1, **extra: object) -> httpx.Response:
    body = {"model": "turnout-tiny", "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": top}
    body.update(extra)
    return httpx.post(f"{base}/v1/completions", json=body, timeout=30)


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


def test_logprobs_match_an_independent_forward_pass(gateway_url: str) -> None:
    torch = pytest.importorskip("torch", reason="needs the recipe's torch: pip install 'turnout[model]'")
    transformers = pytest.importorskip("transformers", reason="pip install 'turnout[model]'")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir()))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir())).eval()
    text = "the red cat sees a big dog."
    ids = [tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    with torch.no_grad():
        reference = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
    expected = [float(reference[j][ids[j + 1]]) for j in range(1, len(ids) - 1)]
    served = score(gateway_url, text, top=0).json()["choices"][0]["logprobs"]["token_logprobs"][1:]
    assert served == pytest.approx(expected, abs=1e-3)


def test_the_openai_client_reads_the_scores(gateway_url: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="x")
    reply = client.completions.create(
        model="turnout-tiny", prompt="03+45=840", max_tokens=0, echo=True, logprobs=1
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None
    assert logprobs.tokens == list("03+45=840") and logprobs.token_logprobs[0] is None


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"logprobs": 9}, "logprobs"), ({"max_tokens": 4}, "max_tokens"), ({"echo": False}, "max_tokens")],
)
def test_bad_scoring_requests_are_400s_naming_the_field(
    gateway_url: str, extra: dict[str, object], param: str
) -> None:
    reply = score(gateway_url, "12+34=", **extra)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param
