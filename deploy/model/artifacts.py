"""Where the shipped embedded model lives; stdlib only, so serving can import it without torch.

``deploy/model/artifacts/turnout-tiny/`` holds ``hf/`` (the Hugging Face folder for transformers
and vLLM) and ``fp32/``, ``int8/``, ``int4/`` (ONNX Runtime GenAI folders for the embedded
engine), plus ``build_info.json``. ``deploy.model.recipe`` (``turnout model build``) writes them.
"""

from __future__ import annotations

from pathlib import Path

ARTIFACTS_DIR = Path(__file__).resolve().parent / "artifacts"
MODEL_NAME = "turnout-tiny"
PRECISIONS = ("fp32", "int8", "int4")
HF_FOLDER = "hf"
BUILD_INFO_FILE = "build_info.json"
# In each GenAI folder beside model.onnx: the graph /v1/embeddings runs, and its one output
# (``deploy.model.export.write_embedding_graph`` writes it, ``backends.embedded_embeddings`` runs it).
EMBEDDING_GRAPH = "embed.onnx"
EMBEDDING_OUTPUT = "hidden_states"


class ModelArtifactsMissing(FileNotFoundError):
    """A model folder the caller needs has not been built."""


def model_dir(root: Path | None = None) -> Path:
    """``<root>/turnout-tiny`` (root defaults to the shipped ``ARTIFACTS_DIR``); not checked."""
    return (ARTIFACTS_DIR if root is None else root) / MODEL_NAME


def _existing(folder: Path, required_file: str) -> Path:
    if not (folder / required_file).is_file():
        raise ModelArtifactsMissing(
            f"model folder {folder} is missing or incomplete (no {required_file}); "
            "run `turnout model build` to create it"
        )
    return folder


def hf_dir(root: Path | None = None) -> Path:
    """The Hugging Face folder (config.json, model.safetensors, tokenizer files)."""
    return _existing(model_dir(root) / HF_FOLDER, "config.json")


def onnx_dir(precision: str, root: Path | None = None) -> Path:
    """The ONNX Runtime GenAI folder for ``precision`` (one of ``PRECISIONS``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    return _existing(model_dir(root) / precision, "genai_config.json")


def build_info_path(root: Path | None = None) -> Path:
    return model_dir(root) / BUILD_INFO_FILE
