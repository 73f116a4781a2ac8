"""Integration tests for deploy.model: the whole recipe (quick mode) and the shipped model folders.

Marked slow: they train, export with the ONNX Runtime GenAI builder and run the models.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deploy.model import artifacts, tasks

og = pytest.importorskip("onnxruntime_genai")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from deploy.model.recipe import build

    root = tmp_path_factory.mktemp("model-build")
    build(root, quick=True, seed=0)
    return root


def test_quick_build_writes_every_folder(quick_build: Path) -> None:
    model_root = artifacts.model_dir(quick_build)
    assert sorted(p.name for p in model_root.iterdir()) == ["build_info.json", "fp32", "hf", "int4", "int8"]
    info = json.loads((model_root / "build_info.json").read_text())
    assert info["quick"] is True and info["parameters"] > 100_000
    # what training is repeatable on: the same kind of CPU (torch's float kernels differ by ISA)
    capabilities = {"DEFAULT", "AVX2", "AVX512", "SVE256"}
    assert info["cpu"]["machine"] and info["cpu"]["torch_capability"] in capabilities
    # transformers writes the weights owner-only; an engine running as another user must read them
    assert (artifacts.hf_dir(root=quick_build) / "model.safetensors").stat().st_mode & 0o777 == 0o644
    for precision in artifacts.PRECISIONS:
        folder = artifacts.onnx_dir(precision, root=quick_build)
        names = {p.name for p in folder.iterdir()}
        expected = {
            "model.onnx",
            "embed.onnx",
            "genai_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
        }
        assert expected <= names
        assert not any(p.is_dir() for p in folder.iterdir()), "builder cache left behind"
        model_section = json.loads((folder / "genai_config.json").read_text())["model"]
        assert (model_section["bos_token_id"], model_section["eos_token_id"]) == (1, 2)
        assert (model_section["pad_token_id"], model_section["context_length"]) == (0, 512)


@pytest.mark.parametrize("precision", artifacts.PRECISIONS)
def test_quick_build_folders_embed_with_the_generating_weights(quick_build: Path, precision: str) -> None:
    """embed.onnx reads model.onnx's weights file (it has none of its own) and gives a normalized
    vector per input, a batch as its inputs alone."""
    from backends.embedded_embeddings import EmbeddingGraph

    folder = artifacts.onnx_dir(precision, root=quick_build)
    assert (folder / "embed.onnx").stat().st_size < 100_000
    graph = EmbeddingGraph(folder)
    rows = [np.array([1, 40, 41, 42], dtype=np.int64), np.array([1, 7], dtype=np.int64)]
    together = graph.embed(rows)
    assert together.shape == (2, 128)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together[1], graph.embed(rows[1:])[0], atol=1e-6)


@pytest.mark.parametrize("precision", artifacts.PRECISIONS)
def test_quick_build_folders_load_and_generate(quick_build: Path, precision: str) -> None:
    model = og.Model(str(artifacts.onnx_dir(precision, root=quick_build)))
    tokenizer = og.Tokenizer(model)
    prompt = np.array([[1, *tokenizer.encode("03+45=")]], dtype=np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=prompt.shape[1] + 1)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    generator.generate_next_token()
    # A barely trained model may well say eos at once, which the sequence of a batch of one omits.
    (next_token,) = generator.get_next_tokens()
    assert 0 <= int(next_token) < 512


def test_quick_build_hf_folder_loads_in_transformers(quick_build: Path) -> None:
    transformers = pytest.importorskip("transformers")
    folder = artifacts.hf_dir(root=quick_build)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert hf_tokenizer("03+45=").input_ids == [
        1,
        *hf_tokenizer("03+45=", add_special_tokens=False).input_ids,
    ]
    chat = [{"role": "user", "content": "03+45="}]
    rendered = hf_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert rendered == tasks.chat_document(3, 45).prompt
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    logits = model(
        input_ids=transformers.AutoTokenizer.from_pretrained(folder)("03+45=", return_tensors="pt").input_ids
    ).logits
    assert logits.shape[-1] == 512


def test_genai_and_hf_tokenizers_agree(quick_build: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(artifacts.hf_dir(root=quick_build))
    genai_tokenizer = og.Tokenizer(og.Model(str(artifacts.onnx_dir("fp32", root=quick_build))))
    samples = [tasks.chat_document(3, 45, "Be brief.").text, *tasks.heldout_text()[:50]]
    for text in samples:
        expected = hf_tokenizer(text, add_special_tokens=False).input_ids
        assert [int(t) for t in genai_tokenizer.encode(text)] == expected


def _shipped_full_build() -> Path:
    try:
        folder = artifacts.onnx_dir("fp32")
    except artifacts.ModelArtifactsMissing:
        pytest.skip("no shipped model")
    if json.loads(artifacts.build_info_path().read_text())["quick"]:
        pytest.skip("shipped model is a --quick build")
    return folder


def test_shipped_model_answers_completion_and_chat() -> None:
    from deploy.model.recipe import generate_greedy

    model = og.Model(str(_shipped_full_build()))
    tokenizer = og.Tokenizer(model)
    prompts = [tasks.completion_document(3, 45).prompt, tasks.chat_document(3, 45, "Be brief.").prompt]
    outputs = generate_greedy(model, [list(tokenizer.encode(p)) for p in prompts], 8, 0)
    assert [tokenizer.decode(np.array(o.tokens, dtype=np.int32)) for o in outputs] == ["840", "840"]
    assert all(o.stopped for o in outputs)


def test_shipped_model_right_padded_batch_matches_one_by_one() -> None:
    from deploy.model.recipe import generate_greedy

    model = og.Model(str(_shipped_full_build()))
    tokenizer = og.Tokenizer(model)
    texts = [
        tasks.completion_document(3, 45).prompt,
        tasks.chat_document(12, 7).prompt,
        tasks.chat_document(50, 50, tasks.SYSTEM_PROMPTS[1]).prompt,
        "<s>the red cat",
        tasks.completion_document(99, 99).prompt,
        "<s>count 3 4 5",
        tasks.chat_document(8, 80, tasks.SYSTEM_PROMPTS[0]).prompt,
        "<s>anna has",
    ]
    prompts = [[int(t) for t in tokenizer.encode(text)] for text in texts]
    assert len({len(p) for p in prompts}) > 4
    batched = generate_greedy(model, prompts, 12, 0)
    one_by_one = [generate_greedy(model, [prompt], 12, 0)[0] for prompt in prompts]
    assert batched == one_by_one
