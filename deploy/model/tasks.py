"""The task mix the embedded model is trained on: pure, deterministic, no torch.

Two kinds of documents feed ``deploy.model.train``:

* 2-digit addition in the learnable format: operands zero-padded to 2 digits, the sum written as
  3 digits reversed (``03+45=`` → ``840``), both as a plain completion (``<s>03+45=840</s>``) and
  as a chat rendered through ``CHAT_TEMPLATE`` (sometimes with a system message). A fixed set of
  200 held-out pairs is never trained on; ``recipe`` measures exact-match accuracy on it.
* "Other text": templated English-like sentences, counting and copy lines from a small grammar.
  The model only partly learns it, so quantized variants measurably disagree with fp32 on the
  held-out slice (``heldout_text``).

The special-token names and the chat template live here too, so the tokenizer and the tests
share one definition, and ``render_chat`` reproduces the Jinja template without Jinja.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
# Order fixes the ids: <pad>=0, <s>=1, </s>=2, then the role markers.
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *ROLE_TOKENS.values())

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

SYSTEM_PROMPTS = (
    "You are a calculator.",
    "Answer with the sum written backwards.",
    "You are the turnout tiny model.",
    "Be brief.",
)

HELDOUT_PAIR_COUNT = 200
HELDOUT_PAIR_SEED = 20240601
HELDOUT_TEXT_COUNT = 200
HELDOUT_TEXT_SEED = 7


@dataclass(frozen=True)
class Document:
    """One training example as text with its special tokens spelled out.

    ``prompt + answer`` is the whole sequence; the trainer weights the ``answer`` part up.
    """

    prompt: str
    answer: str

    @property
    def text(self) -> str:
        return self.prompt + self.answer


# --- addition -------------------------------------------------------------------------------


def addition_prompt(a: int, b: int) -> str:
    """``addition_prompt(3, 45) == "03+45="``."""
    if not (0 <= a <= 99 and 0 <= b <= 99):
        raise ValueError(f"operands must be in 0..99, got {a} and {b}")
    return f"{a:02d}+{b:02d}="


def addition_answer(a: int, b: int) -> str:
    """The sum as 3 digits, reversed: ``addition_answer(3, 45) == "840"``."""
    return f"{a + b:03d}"[::-1]


def decode_addition_answer(text: str) -> int | None:
    """Turn a generated answer back into the sum (``"840"`` → 48); None if it is not 3 digits.

    Trailing whitespace and an end-of-sequence marker are tolerated.
    """
    cleaned = text.strip()
    if cleaned.endswith(EOS_TOKEN):
        cleaned = cleaned[: -len(EOS_TOKEN)].strip()
    if len(cleaned) != 3 or not cleaned.isascii() or not cleaned.isdigit():
        return None
    return int(cleaned[::-1])


def all_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in range(100) for b in range(100)]


@cache
def _heldout_pairs() -> tuple[tuple[int, int], ...]:
    chosen = random.Random(HELDOUT_PAIR_SEED).sample(all_pairs(), HELDOUT_PAIR_COUNT)
    return tuple(sorted(chosen))


def heldout_pairs() -> list[tuple[int, int]]:
    """The 200 fixed (a, b) pairs that training never sees, sorted."""
    return list(_heldout_pairs())


def training_pairs() -> list[tuple[int, int]]:
    """Every pair of 0..99 x 0..99 except the held-out ones (9,800 pairs)."""
    held = set(_heldout_pairs())
    return [pair for pair in all_pairs() if pair not in held]


# --- chat rendering ---------------------------------------------------------------------------


def render_chat(messages: Sequence[tuple[str, str]], add_generation_prompt: bool) -> str:
    """Render (role, content) messages exactly as ``CHAT_TEMPLATE`` does."""
    parts = [BOS_TOKEN]
    for role, content in messages:
        if role not in ROLE_TOKENS:
            raise ValueError(f"unknown chat role {role!r}")
        parts.append(f"{ROLE_TOKENS[role]}{content}{EOS_TOKEN}")
    if add_generation_prompt:
        parts.append(ROLE_TOKENS["assistant"])
    return "".join(parts)


def completion_document(a: int, b: int) -> Document:
    return Document(BOS_TOKEN + addition_prompt(a, b), addition_answer(a, b) + EOS_TOKEN)


def chat_messages(a: int, b: int, system: str | None = None) -> list[tuple[str, str]]:
    """The user turn asking for ``a + b``, after an optional system message."""
    messages = [("system", system)] if system is not None else []
    messages.append(("user", addition_prompt(a, b)))
    return messages


def chat_document(a: int, b: int, system: str | None = None) -> Document:
    prompt = render_chat(chat_messages(a, b, system), add_generation_prompt=True)
    return Document(prompt, addition_answer(a, b) + EOS_TOKEN)


# --- other text -------------------------------------------------------------------------------

_NAMES = ("anna", "ben", "cara", "dev", "eli", "fay", "gus", "hana", "ivo", "june", "kai", "lena")
_COLORS = ("red", "blue", "green", "yellow", "black", "white", "brown", "pink", "gray", "orange")
_NOUNS = ("cat", "dog", "bird", "fish", "horse", "box", "ball", "cup", "book", "tree", "boat", "lamp")
_VERBS = ("sees", "likes", "finds", "moves", "paints", "holds", "wants", "follows", "counts", "hides")
_PLACES = ("garden", "kitchen", "park", "river", "school", "market", "forest", "station")
_ADJECTIVES = ("big", "small", "old", "new", "happy", "quiet", "fast", "slow", "tall", "round")
_NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("sh", "x")) else "s")


def _phrase(rng: random.Random) -> str:
    return f"the {rng.choice(_ADJECTIVES)} {rng.choice(_COLORS)} {rng.choice(_NOUNS)}"


def _sentence(rng: random.Random) -> str:
    kind = rng.randrange(8)
    name, other = rng.sample(_NAMES, 2)
    if kind == 0:
        return f"{_phrase(rng)} {rng.choice(_VERBS)} {_phrase(rng)}."
    if kind == 1:
        count = rng.randrange(2, 10)
        return f"{name} has {_NUMBER_WORDS[count - 1]} {rng.choice(_COLORS)} {_plural(rng.choice(_NOUNS))}."
    if kind == 2:
        verb = rng.choice(_VERBS)
        return f"{name} and {other} {verb} {_phrase(rng)} in the {rng.choice(_PLACES)}."
    if kind == 3:
        start, length = rng.randrange(0, 90), rng.randrange(4, 9)
        return "count " + " ".join(str(n) for n in range(start, start + length)) + "."
    if kind == 4:
        words = [rng.choice(_COLORS + _NOUNS) for _ in range(rng.randrange(2, 5))]
        return f"copy {' '.join(words)} : {' '.join(words)}."
    if kind == 5:
        noun, place = rng.choice(_NOUNS), rng.choice(_PLACES)
        return f"where is the {noun}? the {noun} is in the {place}."
    if kind == 6:
        return f"{name} is {rng.choice(_ADJECTIVES)} and {other} is {rng.choice(_ADJECTIVES)}."
    count = rng.randrange(1, 60)
    return f"{name} walks {count} steps to the {rng.choice(_PLACES)} with {_phrase(rng)}."


@cache
def _heldout_text() -> tuple[str, ...]:
    rng = random.Random(HELDOUT_TEXT_SEED)
    chosen: dict[str, None] = {}
    while len(chosen) < HELDOUT_TEXT_COUNT:
        chosen[_sentence(rng)] = None
    return tuple(chosen)


def heldout_text() -> list[str]:
    """200 fixed sentences of the "other text" kind that training never sees."""
    return list(_heldout_text())


def training_sentences(seed: int) -> Iterator[str]:
    """An endless, seed-determined stream of sentences, none of them in ``heldout_text``."""
    held = set(_heldout_text())
    rng = random.Random(f"turnout-text-{seed}")
    while True:
        sentence = _sentence(rng)
        if sentence not in held:
            yield sentence


def text_document(sentence: str) -> Document:
    return Document(BOS_TOKEN, sentence + EOS_TOKEN)


def training_documents(
    seed: int, count: int, text_share: float = 0.3, chat_share: float = 0.5, system_share: float = 0.3
) -> list[Document]:
    """``count`` documents: ``text_share`` other text, the rest addition over the training pairs.

    Of the additions, ``chat_share`` are chats and ``system_share`` of those carry a system message.
    """
    rng = random.Random(f"turnout-mix-{seed}")
    pairs = training_pairs()
    sentences = training_sentences(seed)
    documents: list[Document] = []
    for _ in range(count):
        if rng.random() < text_share:
            documents.append(text_document(next(sentences)))
            continue
        a, b = rng.choice(pairs)
        if rng.random() < chat_share:
            system = rng.choice(SYSTEM_PROMPTS) if rng.random() < system_share else None
            documents.append(chat_document(a, b, system))
        else:
            documents.append(completion_document(a, b))
    return documents


def tokenizer_corpus(seed: int) -> list[str]:
    """Text the BPE tokenizer is trained on: other text plus addition lines (no special tokens)."""
    sentences = training_sentences(seed)
    corpus = [next(sentences) for _ in range(6000)]
    corpus += [addition_prompt(a, b) + addition_answer(a, b) for a, b in training_pairs()[::7]]
    corpus += list(SYSTEM_PROMPTS) * 200  # frequent enough that each becomes a few whole-word tokens
    return corpus
