"""lm-evaluation-harness against the gateway: ``local-completions`` and ``local-chat-completions``.

The harness runs as users run it (the ``lm_eval`` command, from the repository root, offline)
over the task definitions in ``evals/lm_eval_tasks/`` and the shipped JSONL: multiple choice
by log-likelihood (``echo`` + ``logprobs`` + ``max_tokens: 1``) and generation.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.model.artifacts import hf_dir

ROOT = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("lm_eval") is None or importlib.util.find_spec("tenacity") is None:
    reason = "lm-evaluation-harness is not installed: pip install 'turnout[eval]'"
    pytest.skip(reason, allow_module_level=True)


def lm_eval(*args: str) -> str:
    exe = shutil.which("lm_eval")
    assert exe is not None, "the lm_eval command is missing: pip install 'turnout[eval]'"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [exe, *args, "--include_path", "evals/lm_eval_tasks", "--limit", "10"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def metric(table: str, task: str) -> float:
    found = re.search(rf"\|{task}\s*\|.*?\|\s*(?:acc|exact_match)\s*\|[^|]*\|\s*([0-9.]+)\s*\|", table)
    assert found is not None, table
    return float(found.group(1))


def test_local_completions_loglikelihood_and_generation(gateway_url: str) -> None:
    args = f"model=turnout-tiny,base_url={gateway_url}/v1/completions,tokenizer_backend=huggingface,"
    args += f"tokenizer={hf_dir()},tokenized_requests=False,num_concurrent=4,max_retries=1"
    table = lm_eval("--model", "local-completions", "--model_args", args,
                    "--tasks", "turnout_choice,turnout_addition")  # fmt: skip
    assert metric(table, "turnout_choice") >= 0.9
    assert metric(table, "turnout_addition") >= 0.9


def test_local_completions_in_its_default_tokenized_mode(gateway_url: str) -> None:
    """The harness's default: batches of token-id prompts (``prompt: [[ids...], ...]``)."""
    args = f"model=turnout-tiny,base_url={gateway_url}/v1/completions,tokenizer_backend=huggingface,"
    args += f"tokenizer={hf_dir()},num_concurrent=2,max_retries=1"
    table = lm_eval("--model", "local-completions", "--model_args", args, "--batch_size", "4",
                    "--tasks", "turnout_choice")  # fmt: skip
    assert metric(table, "turnout_choice") >= 0.9


def test_local_chat_completions_generation(gateway_url: str) -> None:
    args = f"model=turnout-tiny,base_url={gateway_url}/v1/chat/completions,num_concurrent=4,max_retries=1"
    table = lm_eval("--model", "local-chat-completions", "--model_args", args, "--apply_chat_template",
                    "--tasks", "turnout_addition")  # fmt: skip
    assert metric(table, "turnout_addition") >= 0.9
