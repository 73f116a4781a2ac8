"""Export the trained model: the Hugging Face folder, then ONNX Runtime GenAI folders per precision.

Called by ``deploy.model.recipe``. ``save_hf_folder`` writes what transformers, vLLM and the GenAI
builder read (safetensors, config.json, generation_config.json, tokenizer files with the chat
template). ``build_onnx`` runs ``python -m onnxruntime_genai.models.builder`` offline from that
folder for ``-e cpu`` at fp32, int8 or int4 (k_quant_mixed), then makes the GenAI folder
self-contained and exact: our tokenizer files replace the builder's re-saved copies, and
genai_config.json gets the right bos/eos/pad ids and a 512-token context. ``embed.onnx`` then
joins it, the graph ``/v1/embeddings`` runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

from deploy.model.artifacts import EMBEDDING_GRAPH, EMBEDDING_OUTPUT
from deploy.model.tokenizer import (
    MODEL_MAX_LENGTH,
    copy_tokenizer_files,
    save_hf_tokenizer,
    special_token_ids,
)

BUILDER_PRECISION_ARGS: dict[str, list[str]] = {
    "fp32": ["-p", "fp32"],
    # The builder's default int8 quantizer lost ~7 points of top-1 agreement here; RTN does not.
    "int8": ["-p", "int8", "--extra_options", "algo_config=rtn"],
    "int4": ["-p", "int4", "--extra_options", "algo_config=k_quant_mixed"],
}
# What serving needs in a GenAI folder; anything else the builder leaves behind is removed.
GENAI_KEEP_SUFFIXES = (".onnx", ".onnx.data", ".json")
GENAI_DROP_FILES = ("chat_template.jinja",)


def save_hf_folder(model: LlamaForCausalLM, tokenizer: Tokenizer, out_dir: Path) -> None:
    """Write the Hugging Face model folder (weights, configs, tokenizer files)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    # transformers writes the weights through a temporary file, so owner-only (0600): readable
    # by every user, as the other files are, so an engine running as another user can load it.
    (out_dir / "model.safetensors").chmod(0o644)
    ids = special_token_ids(tokenizer)
    generation_config = {
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "do_sample": False,
        "max_length": MODEL_MAX_LENGTH,
    }
    _write_json(out_dir / "generation_config.json", generation_config)
    save_hf_tokenizer(tokenizer, out_dir)
    for leftover in GENAI_DROP_FILES:
        (out_dir / leftover).unlink(missing_ok=True)


def build_onnx(hf_dir: Path, out_dir: Path, precision: str, log_path: Path | None = None) -> None:
    """Run the GenAI builder for ``precision`` on CPU into ``out_dir`` and fix up the folder."""
    if precision not in BUILDER_PRECISION_ARGS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {sorted(BUILDER_PRECISION_ARGS)}")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    with tempfile.TemporaryDirectory(prefix="turnout-genai-cache-") as cache_dir:
        command = [
            sys.executable,
            "-m",
            "onnxruntime_genai.models.builder",
            "-i",
            str(hf_dir),
            "-o",
            str(out_dir),
            "-e",
            "cpu",
            "-c",
            cache_dir,
            *BUILDER_PRECISION_ARGS[precision],
        ]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if log_path is not None:
        log_path.write_text(completed.stdout + completed.stderr, encoding="utf-8")
    if completed.returncode != 0:
        tail = (completed.stdout + completed.stderr)[-4000:]
        raise RuntimeError(f"GenAI builder failed for {precision} (exit {completed.returncode}):\n{tail}")
    copy_tokenizer_files(hf_dir, out_dir)
    _prune_genai_folder(out_dir)
    patch_genai_config(out_dir / "genai_config.json", hf_dir)
    write_embedding_graph(out_dir)


def write_embedding_graph(folder: Path) -> Path:
    """``embed.onnx`` beside ``model.onnx``: the same graph and weights file, whose one output is
    the final norm's hidden states (what the LM head reads), for ``/v1/embeddings``
    (``backends/embedded_embeddings.py``). A few tens of KB: the weights are not copied. The LM
    head goes (ONNX Runtime would run it anyway: a sixth of a batch's time here)."""
    import onnx  # the [model] extra, as the builder needs it

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)  # keeps the data reference
    graph = model.graph
    (head,) = [node for node in graph.node if "logits" in node.output]
    hidden_size = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]["hidden_size"]
    del graph.output[:]
    graph.node.remove(head)
    still_read = {name for node in graph.node for name in node.input}
    for weight in [w for w in graph.initializer if w.name in head.input and w.name not in still_read]:
        graph.initializer.remove(weight)  # its bytes stay in the shared data file, unread
    graph.node.append(
        onnx.helper.make_node("Identity", [head.input[0]], [EMBEDDING_OUTPUT], name="/embed/Identity")
    )
    shape: list[str | int | None] = ["batch_size", "sequence_length", int(hidden_size)]
    graph.output.append(onnx.helper.make_tensor_value_info(EMBEDDING_OUTPUT, onnx.TensorProto.FLOAT, shape))
    out = folder / EMBEDDING_GRAPH
    onnx.save(model, str(out))
    return out


def _prune_genai_folder(out_dir: Path) -> None:
    for entry in out_dir.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry)
        elif entry.name in GENAI_DROP_FILES or not entry.name.endswith(GENAI_KEEP_SUFFIXES):
            entry.unlink()


def patch_genai_config(config_path: Path, hf_dir: Path) -> dict[str, Any]:
    """Force bos/eos/pad ids and context length to what the model was trained with; return the config."""
    hf_config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    genai_config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    model_section = genai_config["model"]
    model_section["bos_token_id"] = hf_config["bos_token_id"]
    model_section["eos_token_id"] = hf_config["eos_token_id"]
    model_section["pad_token_id"] = hf_config["pad_token_id"]
    model_section["context_length"] = MODEL_MAX_LENGTH
    search = genai_config.setdefault("search", {})
    search["max_length"] = min(int(search.get("max_length", MODEL_MAX_LENGTH)), MODEL_MAX_LENGTH)
    _write_json(config_path, genai_config)
    return genai_config


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
