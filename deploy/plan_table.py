"""``turnout plan``'s report: one variant planned on many accelerators, as rows, a text table and JSON.

Off the request path: pure composition of ``deploy.plan`` (the arithmetic) and ``deploy.validate``
(would it deploy there?) for each accelerator asked for; the CLI prints what this returns.
The spec keeps everything but the accelerator (and vendor, which follows it): same device count,
parallelism, precision and KV-cache settings on every row, so rows compare like for like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from deploy.accelerators import Accelerator
from deploy.plan import PlanRow, plan_row
from deploy.spec import VariantSpec
from deploy.validate import problems


def plan_all(
    spec: VariantSpec,
    accelerators: Sequence[Accelerator],
    context: int | None = None,
    catalog: Mapping[str, Accelerator] | None = None,
) -> list[PlanRow]:
    """One row per accelerator for sequences of ``context`` tokens (default: max_model_len)."""
    facts = spec.facts()
    length = context or spec.max_model_len()
    table = catalog if catalog is not None else {acc.name: acc for acc in accelerators}
    rows = []
    for acc in accelerators:
        moved = spec.on(acc)
        found = tuple(problems(moved, facts, table))
        rows.append(plan_row(moved, facts, acc, length).model_copy(update={"problems": found}))
    return rows


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _price(usd: float | None) -> str:
    """USD to 3 decimals, or to 2 significant digits below a cent: a tiny model on a GPU costs
    fractions of a cent per million tokens, which 3 decimals showed as 0.000."""
    if usd is None:
        return "-"
    return f"{usd:,.3f}" if usd >= 0.01 or usd == 0 else f"{usd:.2g}"


def _bytes(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    return f"{count / 1024:,.1f} KiB" if count < 10 * 1024 else f"{count / 1024:,.0f} KiB"


def _support_problems(row: PlanRow) -> list[str]:
    return [problem for problem in row.problems if not problem.startswith("memory:")]


HEADERS = (
    "accelerator", "dev", "supported", "fits", "need/avail GiB", "weights/dev", "KV/token", "KV tokens",
    "seqs@ctx", "decode 1", "decode max", "prefill", "$/h", "$/M in", "$/M out",
)  # fmt: skip


def _cells(row: PlanRow, own: str) -> tuple[str, ...]:
    return (
        row.accelerator + (" *" if row.accelerator == own else ""),
        str(row.device_count),
        "no" if _support_problems(row) else "yes",
        "yes" if row.fits else "no",
        f"{row.needed_gib_per_device:.1f}/{row.available_gib_per_device:.1f}",
        f"{row.weights_gib_per_device:.1f} GiB"
        if row.weights_gib_per_device >= 0.1
        else f"{row.weights_gib_per_device * 1024:.1f} MiB",
        _bytes(row.kv_bytes_per_token),
        _number(row.kv_tokens),
        _number(row.max_seqs),
        _number(row.decode_tok_s_single),
        _number(row.decode_tok_s_max_batch),
        _number(row.prefill_tok_s),
        f"{row.usd_per_hour:.2f}",
        _price(row.usd_per_m_input_tokens),
        _price(row.usd_per_m_output_tokens),
    )


def format_table(spec: VariantSpec, rows: Sequence[PlanRow]) -> str:
    """The plan as an aligned text table, a legend, and the support problems per accelerator."""
    cells = [HEADERS, *(_cells(row, spec.accelerator) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADERS))]
    lines = [
        f"{spec.name} ({spec.id}): {spec.facts().name}, {spec.engine}"
        + (", task embed" if spec.task == "embed" else "")
        + f", dtype {spec.dtype}, "
        f"quantization {spec.quantization}, kv {spec.kv_cache.dtype}, TP {spec.tensor_parallel} × "
        f"PP {spec.pipeline_parallel}, context {rows[0].context if rows else spec.max_model_len()}",
        "",
    ]
    for line in cells:
        text = "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        lines.append(text.rstrip())
    lines += [
        "",
        "* the spec's own accelerator. Per replica; GiB per device. supported: the engine, quantization",
        "and settings run there; fits: weights + overhead + one max_model_len sequence of KV fit",
        "(vLLM on CPU: that sequence in the whole GiB of VLLM_CPU_KVCACHE_SPACE it is given).",
        "decode: tokens/s roofline (memory bandwidth), 1 sequence and at max batch, every sequence at",
        "the context length; prefill: tokens/s roofline (dense FLOPs); $/M in: USD per million input",
        "tokens at the prefill roofline; $/M out: USD per million output tokens at max batch.",
    ]
    if spec.task == "embed":  # an embedding variant generates nothing: its work is the prefill
        lines += [
            "task embed: the variant answers /v1/embeddings, one prompt pass per input: read prefill",
            "(input tokens/s), $/h and $/M in; decode and $/M out describe generation, which it does not",
            "serve.",
        ]
    notes = [(row.accelerator, problem) for row in rows for problem in _support_problems(row)]
    if notes:
        lines += ["", "not deployable as written:"]
        lines += [f"  {name}: {problem}" for name, problem in notes]
    return "\n".join(lines)


def as_json(spec: VariantSpec, rows: Sequence[PlanRow]) -> dict[str, object]:
    return {
        "name": spec.name,
        "id": spec.id,
        "model": spec.facts().name,
        "rows": [row.model_dump(mode="json") for row in rows],
    }
