"""Model facts: the shape numbers capacity planning and validation need, for named or local models.

Off the request path: a variant spec (``deploy.spec``) names its model either as a local Hugging
Face folder (read here from its ``config.json``) or as a named architecture from the table
below; ``deploy.validate`` and ``deploy.plan`` then work from these facts alone, never from the
weights. Parameter counts are computed from the shape for Llama-style decoders (Llama, Mistral,
Qwen2): embeddings + per layer (q/k/v/o projections, optional q/k/v bias, gated MLP, two RMSNorms)
+ final norm + lm_head unless tied. For Llama-3-8B this gives 8,030,261,248 and for Llama-3-70B
70,553,706,496, the counts the published checkpoints have.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

_Count = Annotated[int, Field(ge=1)]
# model_type values whose parameter count the Llama-style formula gets right.
LLAMA_STYLE = ("llama", "mistral", "qwen2")
TINY = "turnout-tiny"


class ModelFactsError(ValueError):
    """A model that cannot be described: unknown name, unreadable or unsupported config.json."""


class ModelFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_layers: _Count
    hidden_size: _Count
    num_attention_heads: _Count
    num_kv_heads: _Count  # grouped-query attention: fewer KV heads than attention heads
    head_dim: _Count
    vocab_size: _Count
    intermediate_size: _Count
    num_params: _Count
    max_context: _Count  # max_position_embeddings: the longest sequence the model supports
    tie_word_embeddings: bool = False  # lm_head shares the input embedding matrix
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    # A quantized checkpoint's group size, from its config.json's quantization_config (AWQ, GPTQ):
    # -1 is per-channel; None when it says none (``deploy.validate`` then assumes 128).
    quant_group_size: int | None = None

    @property
    def embedding_params(self) -> int:
        """Input embedding plus lm_head (counted once when tied): kept unquantized by most engines."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)


def llama_style_params(
    *,
    num_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_kv_heads: int,
    head_dim: int,
    vocab_size: int,
    intermediate_size: int,
    tie_word_embeddings: bool = False,
    attention_bias: bool = False,
    mlp_bias: bool = False,
) -> int:
    """Parameters of a Llama-style decoder, from its shape."""
    q_width = num_attention_heads * head_dim
    kv_width = num_kv_heads * head_dim
    attention = hidden_size * (q_width + 2 * kv_width) + q_width * hidden_size
    if attention_bias:
        attention += q_width + 2 * kv_width
    mlp = 3 * hidden_size * intermediate_size
    if mlp_bias:
        mlp += 2 * intermediate_size + hidden_size
    per_layer = attention + mlp + 2 * hidden_size  # input and post-attention RMSNorm
    embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
    return embeddings + num_layers * per_layer + hidden_size  # + final norm


def _facts(name: str, **shape: Any) -> ModelFacts:
    max_context = shape.pop("max_context")
    params = llama_style_params(**shape)
    return ModelFacts(name=name, num_params=params, max_context=max_context, **shape)


_LLAMA3_8B = {
    "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "intermediate_size": 14336,
}  # fmt: skip
_LLAMA3_70B = {
    "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_kv_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "intermediate_size": 28672,
}  # fmt: skip

# Shapes from each model's published config.json (Hugging Face model cards of meta-llama,
# mistralai and Qwen). Llama 3.1 differs from Llama 3 only in context length (RoPE scaling).
_NAMED: dict[str, ModelFacts] = {
    facts.name: facts
    for facts in (
        _facts("llama-3-8b", max_context=8192, **_LLAMA3_8B),
        _facts("llama-3-70b", max_context=8192, **_LLAMA3_70B),
        _facts("llama-3.1-8b", max_context=131072, **_LLAMA3_8B),
        _facts("llama-3.1-70b", max_context=131072, **_LLAMA3_70B),
        # Mistral-7B-v0.3: 32k vocabulary and context.
        _facts(
            "mistral-7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
            head_dim=128, vocab_size=32768, intermediate_size=14336, max_context=32768,
        ),
        # Qwen2.5-7B: q/k/v biases; 7,615,616,512 parameters.
        _facts(
            "qwen2.5-7b", num_layers=28, hidden_size=3584, num_attention_heads=28, num_kv_heads=4,
            head_dim=128, vocab_size=152064, intermediate_size=18944, max_context=32768,
            attention_bias=True,
        ),
    )
}  # fmt: skip


def architectures() -> tuple[str, ...]:
    """Every name ``named_facts`` knows (the project's own model included)."""
    return (*_NAMED, TINY)


def named_facts(name: str) -> ModelFacts:
    """Facts of a named architecture; ``turnout-tiny`` is read from the shipped HF folder."""
    if name == TINY:
        from deploy.model.artifacts import ModelArtifactsMissing, hf_dir

        try:
            return facts_from_hf_folder(hf_dir(), name=TINY)
        except ModelArtifactsMissing as exc:
            raise ModelFactsError(str(exc)) from None
    try:
        return _NAMED[name]
    except KeyError:
        raise ModelFactsError(f"unknown architecture {name!r}; known: {', '.join(architectures())}") from None


def _int(config: dict[str, Any], key: str, source: Path, default: int | None = None) -> int:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelFactsError(f"{source}: {key}: expected a positive integer, got {value!r}")
    return value


def facts_from_config(config: dict[str, Any], *, name: str, source: Path) -> ModelFacts:
    """Facts from a parsed HF ``config.json`` of a Llama-style model (``source`` names it in errors)."""
    model_type = config.get("model_type")
    if model_type not in LLAMA_STYLE:
        raise ModelFactsError(
            f"{source}: model_type: {model_type!r} is not supported; "
            f"expected a Llama-style decoder ({', '.join(LLAMA_STYLE)})"
        )
    heads = _int(config, "num_attention_heads", source)
    hidden = _int(config, "hidden_size", source)
    shape: dict[str, Any] = {
        "num_layers": _int(config, "num_hidden_layers", source),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": _int(config, "num_key_value_heads", source, default=heads),
        "head_dim": _int(config, "head_dim", source, default=hidden // heads),
        "vocab_size": _int(config, "vocab_size", source),
        "intermediate_size": _int(config, "intermediate_size", source),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "attention_bias": bool(config.get("attention_bias", model_type == "qwen2")),
    }
    params = llama_style_params(**shape, mlp_bias=bool(config.get("mlp_bias", False)))
    max_context = _int(config, "max_position_embeddings", source)
    quantized = config.get("quantization_config")
    quantized = quantized if isinstance(quantized, dict) else {}
    group = quantized.get("group_size", quantized.get("q_group_size"))
    group_size = group if isinstance(group, int) and not isinstance(group, bool) and group != 0 else None
    return ModelFacts(
        name=name, num_params=params, max_context=max_context, quant_group_size=group_size, **shape
    )


def facts_from_hf_folder(path: Path, name: str | None = None) -> ModelFacts:
    """Facts of the local Hugging Face folder ``path`` (its ``config.json``; weights are not read).

    ``name`` defaults to the folder's name (its parent's for a folder called ``hf``).
    """
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except OSError as exc:
        raise ModelFactsError(f"{config_file}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ModelFactsError(f"{config_file}: not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelFactsError(f"{config_file}: expected a JSON object")
    # A folder named "hf" (the layout deploy.model writes) is named after its parent.
    default = path.resolve().parent.name if path.name == "hf" else path.name
    return facts_from_config(config, name=name or default, source=config_file)
