"""Unit tests for deploy.model.tasks: the embedded model's task formats, splits and determinism."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from deploy.model import artifacts, tasks


def test_addition_format_is_zero_padded_and_reversed() -> None:
    assert tasks.addition_prompt(3, 45) == "03+45="
    assert tasks.addition_answer(3, 45) == "840"
    assert tasks.addition_answer(99, 99) == "891"
    assert tasks.addition_answer(0, 0) == "000"
    assert tasks.completion_document(3, 45).text == "<s>03+45=840</s>"


def test_addition_prompt_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        tasks.addition_prompt(100, 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("840", 48),
        ("891", 198),
        ("000", 0),
        (" 840</s>", 48),
        ("840 ", 48),
        ("84", None),
        ("8400", None),
        ("8a0", None),
        ("", None),
    ],
)
def test_decode_addition_answer(text: str, expected: int | None) -> None:
    assert tasks.decode_addition_answer(text) == expected


def test_every_sum_round_trips() -> None:
    for a, b in tasks.all_pairs():
        assert tasks.decode_addition_answer(tasks.addition_answer(a, b)) == a + b


def test_heldout_pairs_are_fixed_and_disjoint_from_training() -> None:
    held = tasks.heldout_pairs()
    assert len(held) == 200 == len(set(held))
    assert held == tasks.heldout_pairs()
    training = tasks.training_pairs()
    assert len(training) == 10_000 - 200
    assert not set(held) & set(training)
    assert set(held) | set(training) == set(tasks.all_pairs())


def test_training_documents_never_contain_heldout_items() -> None:
    held_prompts = {tasks.addition_prompt(a, b) for a, b in tasks.heldout_pairs()}
    held_text = {sentence + tasks.EOS_TOKEN for sentence in tasks.heldout_text()}
    for document in tasks.training_documents(seed=0, count=5000):
        assert not any(prompt in document.prompt for prompt in held_prompts)
        assert document.answer not in held_text


def test_training_documents_are_deterministic_per_seed() -> None:
    first = tasks.training_documents(seed=3, count=300)
    assert first == tasks.training_documents(seed=3, count=300)
    assert first != tasks.training_documents(seed=4, count=300)
    assert tasks.tokenizer_corpus(0) == tasks.tokenizer_corpus(0)


def test_mix_has_completions_chats_system_messages_and_text() -> None:
    documents = tasks.training_documents(seed=0, count=2000)
    completions = [d for d in documents if d.prompt.startswith("<s>") and d.prompt[3:4].isdigit()]
    chats = [d for d in documents if "<|assistant|>" in d.prompt]
    with_system = [d for d in chats if "<|system|>" in d.prompt]
    text = [d for d in documents if d.prompt == tasks.BOS_TOKEN]
    assert len(completions) + len(chats) + len(text) == len(documents)
    assert min(len(completions), len(chats), len(with_system), len(text)) > 100


def test_heldout_text_is_fixed_unique_sentences() -> None:
    text = tasks.heldout_text()
    assert len(text) == 200 == len(set(text))
    assert text == tasks.heldout_text()
    assert all(line.endswith(".") for line in text)


def test_chat_document_matches_the_jinja_template() -> None:
    template = jinja2.Environment().from_string(tasks.CHAT_TEMPLATE)
    for system in (None, "Be brief."):
        messages = tasks.chat_messages(3, 45, system)
        rendered = template.render(
            messages=[{"role": role, "content": content} for role, content in messages],
            bos_token=tasks.BOS_TOKEN,
            eos_token=tasks.EOS_TOKEN,
            add_generation_prompt=True,
        )
        document = tasks.chat_document(3, 45, system)
        assert rendered == document.prompt
        assert document.answer == "840</s>"
    assert tasks.chat_document(3, 45).text == "<s><|user|>03+45=</s><|assistant|>840</s>"


def test_special_token_order_fixes_pad_bos_eos_ids() -> None:
    assert tasks.SPECIAL_TOKENS[:3] == ("<pad>", "<s>", "</s>")


def test_tasks_and_artifacts_import_no_torch() -> None:
    code = (
        "import sys, deploy.model.tasks, deploy.model.artifacts; "
        "assert not {'torch', 'transformers', 'tokenizers'} & set(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_artifacts_paths_raise_a_clear_error_when_missing(tmp_path: Path) -> None:
    with pytest.raises(artifacts.ModelArtifactsMissing, match="turnout model build"):
        artifacts.onnx_dir("fp32", root=tmp_path)
    with pytest.raises(artifacts.ModelArtifactsMissing, match="turnout model build"):
        artifacts.hf_dir(root=tmp_path)
    with pytest.raises(ValueError):
        artifacts.onnx_dir("fp16")
