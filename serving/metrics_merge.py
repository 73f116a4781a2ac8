"""One ``/metrics`` page for every gateway replica of a Ray Serve application (pure).

Off the request path: Serve's proxy sends a scrape of ``/metrics`` to one gateway replica of its
choosing, whose own registry counted only the requests it served, so a Prometheus scraping the
proxy saw each counter jump between replicas' values. Under ``turnout serve --ray`` every
gateway replica publishes its page to the counter deployment (``serving.ray_deployments``), and
the replica a scrape reaches answers with :func:`merge_pages`: every replica's series, each
sample labelled ``gateway_replica`` (sum over it, as over pods), except the families that
describe the shared engine deployments (``SHARED_FAMILIES``), which every replica reads from
the same board and which appear once, unlabelled, from the answering replica.

The pages are Prometheus text (0.0.4) as ``prometheus_client`` writes them: each family a
``# HELP`` and a ``# TYPE`` line, then its samples. They are merged as text, line by line: a
sample gets its label right after the metric name, so label values are never parsed (parsing
and re-rendering every replica's page took ~0.5 s of the answering replica's event loop at
1.5 MB of pages).
"""

from __future__ import annotations

from collections.abc import Mapping

REPLICA_LABEL = "gateway_replica"  # not "replica": the replica-set gauges use that for backends
# Read by every gateway replica from the engines' shared reports (backends.ray_engine): the same
# figures on each, so once per page (their _total/_created companions with them).
SHARED_FAMILIES = frozenset({"turnout_queue_depth", "turnout_engine_generated_tokens", "turnout_batch_size"})


def _base(name: str) -> str:
    for suffix in ("_total", "_created"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _families(page: str) -> dict[str, tuple[list[str], list[str]]]:
    """Family name (as its ``# HELP`` line says) → (its comment lines, its sample lines)."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    current: tuple[list[str], list[str]] = ([], [])
    for line in page.split("\n"):  # not splitlines(): a label value may hold \u2028, \x85...
        if not line:
            continue
        if line.startswith("# HELP "):
            current = found.setdefault(line.split(" ", 3)[2], ([], []))
            current[0].append(line)
        elif line.startswith("#"):
            current[0].append(line)
        else:
            current[1].append(line)
    return found


def _labelled(sample: str, label: str) -> str:
    """``name{a="b"} 1`` → ``name{LABEL,a="b"} 1``; ``name 1`` → ``name{LABEL} 1``."""
    cut = min((at for at in (sample.find("{"), sample.find(" ")) if at >= 0), default=len(sample))
    if sample[cut : cut + 1] == "{":
        rest = sample[cut + 1 :]
        return f"{sample[: cut + 1]}{label}{'' if rest.startswith('}') else ','}{rest}"
    return f"{sample[:cut]}{{{label}}}{sample[cut:]}"


def merge_pages(own: str, pages: Mapping[str, str], shared: frozenset[str] = SHARED_FAMILIES) -> bytes:
    """The exposition text of ``pages`` (replica id → its page) with every sample labelled by its
    replica, and of ``shared`` families only ``own``'s (the answering replica's page), as is."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for name, (comments, samples) in _families(own).items():
        if _base(name) in shared:
            merged[name] = (comments, list(samples))
    for replica, page in sorted(pages.items()):
        escaped = replica.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        label = f'{REPLICA_LABEL}="{escaped}"'
        for name, (comments, samples) in _families(page).items():
            if _base(name) in shared:
                continue
            into = merged.setdefault(name, (comments, []))
            into[1].extend(_labelled(sample, label) for sample in samples)
    lines = [line for comments, samples in merged.values() for line in (*comments, *samples)]
    return ("\n".join(lines) + "\n").encode()
