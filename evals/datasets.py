"""The evaluation datasets the project ships (``evals/data/*.jsonl``) and the loader for any JSONL set.

Off the request path. ``python -m evals.datasets`` re-creates the shipped files byte for byte
from the model recipe's own held-out data (``deploy/model/tasks.py``: never trained on) and
fixed seeds; a test checks the files match. Each file's name carries its version
(``addition@1`` → ``addition-v1.jsonl``); change a generator, bump the version.

Shapes (one JSON object per line, ``id`` unique):
- generation: ``{"id", "prompt", "answer"}`` — scored by exact, normalized or regex match;
- text: ``{"id", "text"}`` — per-token log-likelihood / perplexity;
- choice: ``{"id", "prompt", "choices": [str, …], "answer": int}`` — log-likelihood of each choice.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deploy.model.tasks import addition_answer, addition_prompt, heldout_pairs, heldout_text

DATA = Path(__file__).with_name("data")
Kind = Literal["generation", "text", "choice"]
CHOICE_SEED = 11
CONTINUATION_WORDS = 3  # a continuation prompt is the first words of a held-out sentence


class DatasetError(ValueError):
    """A dataset line that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    version: int
    kind: Kind
    rows: tuple[dict[str, Any], ...]

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def path(self) -> Path:
        return DATA / f"{self.name}-v{self.version}.jsonl"


def _addition() -> list[dict[str, Any]]:
    return [
        {"id": f"add-{i:04d}", "prompt": addition_prompt(a, b), "answer": addition_answer(a, b)}
        for i, (a, b) in enumerate(heldout_pairs())
    ]


def _text() -> list[dict[str, Any]]:
    return [{"id": f"text-{i:04d}", "text": sentence} for i, sentence in enumerate(heldout_text())]


def _continuation() -> list[dict[str, Any]]:
    """Opening words of held-out sentences: greedy continuations to compare between variants."""
    rows = []
    for i, sentence in enumerate(heldout_text()[:100]):
        words = sentence.split()
        rows.append({"id": f"cont-{i:04d}", "prompt": " ".join(words[:CONTINUATION_WORDS]),
                     "answer": " " + " ".join(words[CONTINUATION_WORDS:])})  # fmt: skip
    return rows


def _choice() -> list[dict[str, Any]]:
    """Counting and copying, which the model learned: the right next words among distractors."""
    rng = random.Random(CHOICE_SEED)
    rows = []
    for i in range(100):
        if i % 2 == 0:
            start = rng.randrange(0, 80)
            prompt = "count " + " ".join(str(n) for n in range(start, start + 4))
            right = start + 4
            wrong = rng.sample([n for n in range(start, start + 12) if n != right], 3)
            choices = [f" {n}" for n in (right, *wrong)]
        else:
            words = rng.sample(["red", "blue", "green", "cat", "dog", "bird", "ball", "book"], 3)
            prompt = f"copy {' '.join(words)} :"
            shuffled = [words[1], words[0], words[2]]
            choices = [" " + " ".join(words), " " + " ".join(shuffled), " " + " ".join(reversed(words))]
        order = list(range(len(choices)))
        rng.shuffle(order)
        rows.append({"id": f"choice-{i:04d}", "prompt": prompt,
                     "choices": [choices[j] for j in order], "answer": order.index(0)})  # fmt: skip
    return rows


def shipped() -> dict[str, Dataset]:
    """Every dataset the project ships, by name (generated in memory, deterministic)."""
    made = [
        Dataset("addition", 1, "generation", tuple(_addition())),
        Dataset("continuation", 1, "generation", tuple(_continuation())),
        Dataset("text", 1, "text", tuple(_text())),
        Dataset("choice", 1, "choice", tuple(_choice())),
    ]
    return {dataset.name: dataset for dataset in made}


def render(dataset: Dataset) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in dataset.rows)


_REQUIRED: dict[Kind, dict[str, type | tuple[type, ...]]] = {
    "generation": {"id": str, "prompt": str, "answer": str},
    "text": {"id": str, "text": str},
    "choice": {"id": str, "prompt": str, "choices": list, "answer": int},
}


def load(path: Path, kind: Kind, name: str | None = None, version: int = 0) -> Dataset:
    """Read a JSONL dataset of ``kind``; errors name the file, line and field."""
    rows, seen = [], set()
    # Lines end at "\n" alone: str.splitlines also cuts at U+2028, U+2029 and U+0085, which a
    # JSON string may hold as they are (``render`` writes them so, ensure_ascii=False).
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected an object")
        for field, expected in _REQUIRED[kind].items():
            if not isinstance(row.get(field), expected):
                wanted = getattr(expected, "__name__", str(expected))
                raise DatasetError(f"{where}: field '{field}' missing or not {wanted}")
        if kind == "choice" and not 0 <= row["answer"] < len(row["choices"]):
            raise DatasetError(f"{where}: field 'answer' is not an index into choices")
        if row["id"] in seen:
            raise DatasetError(f"{where}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return Dataset(name or path.stem, version, kind, tuple(rows))


def write_shipped() -> list[Path]:
    DATA.mkdir(exist_ok=True)
    written = []
    for dataset in shipped().values():
        dataset.path.write_text(render(dataset), encoding="utf-8")
        written.append(dataset.path)
    return written


if __name__ == "__main__":
    for path in write_shipped():
        print(path)
