"""Byte-level BPE tokenizer for the embedded model, trained with ``tokenizers`` on the task mix.

Digits are split one per token before byte-level BPE, so ``03+45=840`` is one token per
character. ``<pad>`` is id 0, ``<s>`` 1, ``</s>`` 2, then ``<|system|>``, ``<|user|>``,
``<|assistant|>``. A post-processor prepends ``<s>`` when ``add_special_tokens=True`` (what
transformers and vLLM do for completions). ``save_hf_tokenizer`` writes the files transformers,
vLLM and ONNX Runtime GenAI read: tokenizer.json, tokenizer_config.json (with ``chat_template``)
and special_tokens_map.json. Used by ``deploy.model.train`` and ``deploy.model.export``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from deploy.model.tasks import BOS_TOKEN, CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN, SPECIAL_TOKENS

VOCAB_SIZE = 512
MODEL_MAX_LENGTH = 512
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def train_tokenizer(corpus: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train the byte-level BPE on ``corpus``; deterministic for a given corpus."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bos_id = token_id(tokenizer, BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    for index, name in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(name) != index:
            raise RuntimeError(f"special token {name} got id {tokenizer.token_to_id(name)}, expected {index}")
    return tokenizer


def token_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a token that must be in the vocabulary."""
    found: int | None = tokenizer.token_to_id(token)
    if found is None:
        raise KeyError(f"token {token!r} is not in the vocabulary")
    return found


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """``{"pad": 0, "bos": 1, "eos": 2}`` as this tokenizer spells them."""
    names = {"pad": PAD_TOKEN, "bos": BOS_TOKEN, "eos": EOS_TOKEN}
    return {key: token_id(tokenizer, token) for key, token in names.items()}


def _added_tokens_decoder(tokenizer: Tokenizer) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for name in SPECIAL_TOKENS:
        entries[str(token_id(tokenizer, name))] = {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    return entries


def tokenizer_config(tokenizer: Tokenizer) -> dict[str, Any]:
    """The tokenizer_config.json contents (transformers' PreTrainedTokenizerFast)."""
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": _added_tokens_decoder(tokenizer),
        "bos_token": BOS_TOKEN,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "extra_special_tokens": [name for name in SPECIAL_TOKENS[3:]],
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD_TOKEN,
        "padding_side": "right",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def save_hf_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config(tokenizer))
    special_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": list(SPECIAL_TOKENS[3:]),
    }
    _write_json(out_dir / "special_tokens_map.json", special_map)


def copy_tokenizer_files(source_dir: Path, target_dir: Path) -> None:
    """Copy the tokenizer files (replacing whatever is there) from one model folder to another."""
    for name in TOKENIZER_FILES:
        (target_dir / name).write_bytes((source_dir / name).read_bytes())


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
