"""``turnout loadtest`` against real gateways: its summary agrees with the gateway's own /metrics.

Short bounded runs (≤ 6 s each): the embedded model behind ``turnout serve``, and an A/B split
of two fault servers (per-variant figures). Counts must equal the gateway's
``turnout_requests_total``; mean TTFT must sit just above the gateway's own TTFT (the client
also pays the network and its own scheduling).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from backends.fault import FaultServer
from serving.launcher import Launched, gateway_process
from tests.integration.control_plane import (
    ADMIN_TOKEN,
    fault_variant,
    metric_value,
    running_gateway,
    write_config,
)

# Look, do not import: importing locust would gevent-patch the whole test process.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed: pip install 'turnout[loadtest]'", allow_module_level=True)


def loadtest(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "serving.cli", "loadtest", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def embedded() -> Iterator[Launched]:
    with gateway_process() as launched:
        yield launched


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with FaultServer(reply="a b c d") as a, FaultServer(reply="e f g h") as b:
        dead = {**fault_variant(a), "base_url": "http://127.0.0.1:9/v1"}  # nothing listens there
        variants = {"a": fault_variant(a), "b": fault_variant(b), "dead": dead}
        routes = {
            "ab": {"targets": [{"variant": "a", "weight": 50}, {"variant": "b", "weight": 50}]},
            "dead": {"targets": [{"variant": "dead"}]},
        }
        config = write_config(tmp_path_factory.mktemp("lt") / "gateway.yaml", variants, routes)
        with running_gateway(config) as launched:  # with the admin token: --variant needs one
            yield launched


def _counts(url: str, route: str, **labels: str) -> float:
    return metric_value(url, "turnout_requests_total", route=route, **labels)


def test_a_steady_run_matches_the_gateways_own_counters(embedded: Launched, tmp_path: Path) -> None:
    route = "turnout-tiny-int4"
    before = _counts(embedded.url, route)
    prompt_tokens = metric_value(embedded.url, "turnout_tokens_total", route=route, kind="prompt")
    ttft_sum = metric_value(embedded.url, "turnout_time_to_first_token_seconds_sum", route=route)
    ttft_count = metric_value(embedded.url, "turnout_time_to_first_token_seconds_count", route=route)
    done = loadtest("--target", embedded.url, "--route", route, "--users", "4", "--duration", "5s",
                    "--max-tokens", "8", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    overall = summary["overall"]
    assert overall["requests"] > 50 and overall["errors"] == 0
    assert overall["requests"] == _counts(embedded.url, route) - before
    served = metric_value(embedded.url, "turnout_time_to_first_token_seconds_count", route=route) - ttft_count
    gateway_ttft_ms = (
        1000
        * (metric_value(embedded.url, "turnout_time_to_first_token_seconds_sum", route=route) - ttft_sum)
        / served
    )
    client_ttft_ms = overall["ttft_ms"]["mean"]
    print(f"mean TTFT: client {client_ttft_ms:.2f} ms, gateway {gateway_ttft_ms:.2f} ms")
    # the client's TTFT adds HTTP, parsing and queueing to the gateway's: never less, and not far
    # off (locust, the gateway and the engine share 2 cores here)
    assert gateway_ttft_ms * 0.95 <= client_ttft_ms <= gateway_ttft_ms * 2 + 50
    assert overall["output_tokens"] > 0 and overall["itl_ms"]["p50"] is not None
    # 8 tokens of text, as the gateway counted them: BOS and the chat template come on top
    counted = metric_value(embedded.url, "turnout_tokens_total", route=route, kind="prompt") - prompt_tokens
    assert overall["prompt_tokens_mean"] == counted / overall["requests"] == 12.0
    said = "Prompts: 8 tokens of text, 12.0 as the server counted them (chat template and BOS included)"
    assert said in (tmp_path / "summary.md").read_text()
    assert summary["variants"][route]["engine"] == "onnxruntime-genai"
    assert summary["request"]["max_tokens"] == [8, 8] and summary["request"]["requested_duration_s"] == 5.0
    for name in ("locust_stats.csv", "locust.html", "summary.md", "records.jsonl"):
        assert (tmp_path / name).is_file(), name
    assert "| turnout-tiny-int4 |" in (tmp_path / "summary.md").read_text()
    assert "[" in done.stderr and "req/s" in done.stderr  # live progress


@pytest.mark.parametrize("stream", [True, False])
def test_a_run_over_the_responses_api(embedded: Launched, tmp_path: Path, stream: bool) -> None:
    """``--endpoint responses``: its stream ends with response.completed, not [DONE], and its
    usage is input/output tokens; a run read as chat saw every request as cut off."""
    route = "turnout-tiny"
    before = _counts(embedded.url, route, endpoint="responses")
    done = loadtest("--target", embedded.url, "--route", route, "--users", "2", "--duration", "3s",
                    "--max-tokens", "8", "--endpoint", "responses", *([] if stream else ["--no-stream"]),
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    overall = json.loads((tmp_path / "summary.json").read_text())["overall"]
    assert overall["requests"] > 10 and overall["errors"] == 0
    assert overall["requests"] == _counts(embedded.url, route, endpoint="responses") - before
    assert overall["output_tokens"] > 0 and overall["prompt_tokens_mean"] == 12.0  # as chat's
    if stream:
        assert overall["ttft_ms"]["p50"] is not None and overall["itl_ms"]["p50"] is not None
    assert "tokens_estimated" not in (tmp_path / "records.jsonl").read_text()  # the usage was read


def test_a_run_over_the_embeddings_api(embedded: Launched, tmp_path: Path) -> None:
    """``--endpoint embeddings``: whole answers (never streamed), the input tokens as the work."""
    route = "turnout-tiny"
    before = _counts(embedded.url, route, endpoint="embeddings")
    prompt_tokens = metric_value(embedded.url, "turnout_tokens_total", route=route, kind="prompt")
    done = loadtest("--target", embedded.url, "--route", route, "--users", "2", "--duration", "3s",
                    "--prompt-tokens", "16", "--endpoint", "embeddings", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    overall = summary["overall"]
    assert summary["stream"] is False
    assert overall["requests"] > 10 and overall["errors"] == 0
    assert overall["requests"] == _counts(embedded.url, route, endpoint="embeddings") - before
    counted = metric_value(embedded.url, "turnout_tokens_total", route=route, kind="prompt") - prompt_tokens
    assert overall["prompt_tokens_mean"] == counted / overall["requests"] == 17.0  # BOS on top
    assert overall["output_tokens"] == 0 and overall["prompt_tokens_per_s"] > 0
    said = "Prompts: 16 tokens of text, 17.0 as the server counted them (BOS included); "
    assert said in (tmp_path / "summary.md").read_text() and "input tokens/s embedded" in done.stdout
    assert f"| all | {overall['requests']} | 0 |" in done.stdout and " in |" in done.stdout  # input tokens/s


def test_variants_load_tested_on_embeddings_are_compared_per_million_input_tokens(
    embedded: Launched, tmp_path: Path
) -> None:
    runs = []
    for route in ("turnout-tiny", "turnout-tiny-int8"):
        runs.append(str(tmp_path / route))
        done = loadtest("--target", embedded.url, "--route", route, "--users", "2", "--duration", "2s",
                        "--prompt-tokens", "16", "--endpoint", "embeddings", "--out", runs[-1])  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "serving.cli", "compare", "--variants", "turnout-tiny,turnout-tiny-int8",
           "--load", *runs, "--out", str(out)]  # fmt: skip
    compared = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0, compared.stderr[-2000:]
    header, _, fp32 = (out / "report.md").read_text().splitlines()[2:5]
    assert "| input tokens/s |" in header and "| $/M input tokens |" in header
    tokens = json.loads((tmp_path / "turnout-tiny" / "summary.json").read_text())["overall"][
        "prompt_tokens_per_s"
    ]
    cells = [cell.strip() for cell in fp32.split("|")]
    assert cells[9] == f"{tokens:.0f}" and cells[12] == "cpu-x86" and float(cells[13]) > 0  # priced
    assert "turnout-tiny-int8: " in compared.stdout and "× tokens/s" in compared.stdout


def test_an_ab_split_is_reported_per_variant(split: Launched, tmp_path: Path) -> None:
    before = {v: _counts(split.url, "ab", variant=v) for v in ("a", "b")}
    done = loadtest("--target", split.url, "--route", "ab", "--users", "8", "--duration", "4s",
                    "--endpoint", "completions", "--no-stream", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["per_variant"]) == {"a", "b"}
    for variant in ("a", "b"):
        counted = _counts(split.url, "ab", variant=variant) - before[variant]
        assert summary["per_variant"][variant]["requests"] == counted > 10
    assert summary["variants"]["a"]["kind"] == "openai_http"


def test_variant_pins_a_split_routes_variant(split: Launched, tmp_path: Path) -> None:
    """`--variant b` measures b alone, as the README's pricing workflow needs."""
    before = {v: _counts(split.url, "ab", variant=v) for v in ("a", "b")}
    done = loadtest("--target", split.url, "--route", "ab", "--variant", "b", "--users", "4",
                    "--duration", "3s", "--no-stream", "--api-key", ADMIN_TOKEN,
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["per_variant"]) == {"b"} and summary["per_variant"]["b"]["requests"] > 10
    assert _counts(split.url, "ab", variant="a") == before["a"]
    served_by_b = _counts(split.url, "ab", variant="b") - before["b"]
    assert served_by_b == summary["per_variant"]["b"]["requests"] + 1  # + the preflight's one request
    for variant, key, said in (("c", ADMIN_TOKEN, "answered 400"), ("b", None, "answered 403")):
        key_args = ("--api-key", key) if key else ()
        refused = loadtest("--target", split.url, "--route", "ab", "--variant", variant, "--users", "1",
                           "--duration", "1s", *key_args, "--out", str(tmp_path))  # fmt: skip
        assert refused.returncode == 1 and f"--variant {variant}: {split.url} {said}" in refused.stderr


def test_a_ramp_stops_at_the_first_step_over_its_slo(split: Launched, tmp_path: Path) -> None:
    done = loadtest("--target", split.url, "--route", "ab", "--scenario", "ramp", "--users", "8",
                    "--step-users", "2", "--step", "2s", "--duration", "8s", "--slo-p95-ttft-ms", "0.001",
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    knee = json.loads((tmp_path / "summary.json").read_text())["knee"]
    assert len(knee["steps"]) == 1 and not knee["steps"][0]["ok"]
    assert knee["max_sustainable_rps"] == 0.0
    assert json.loads((tmp_path / "summary.json").read_text())["duration_s"] < 6


def test_a_spike_falls_back_at_once(split: Launched, tmp_path: Path) -> None:
    """8 users for the middle third, 2 on either side. Locust stops users at the spawn rate, so
    with a rate of the users wanted (2) the fall took three seconds (8, 6, 4 in locust's history)."""
    done = loadtest("--target", split.url, "--route", "ab", "--scenario", "spike", "--users", "8",
                    "--duration", "6s", "--no-stream", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = (tmp_path / "locust_stats_history.csv").read_text().splitlines()[1:]
    counts = [int(row.split(",")[1]) for row in rows if row.split(",")[3] == "Aggregated"]
    assert 8 in counts, counts
    after_peak = counts[len(counts) - counts[::-1].index(8) :]
    assert after_peak and sum(1 for users in after_peak if 2 < users < 8) <= 1, counts
    assert 2 in after_peak, counts


def test_compare_prints_a_table_and_writes_a_chart(split: Launched, tmp_path: Path) -> None:
    for name in ("one", "two"):
        done = loadtest("--target", split.url, "--route", "ab", "--users", "2", "--duration", "2s",
                        "--out", str(tmp_path / name))  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    png = tmp_path / "compare.png"
    compared = loadtest("compare", str(tmp_path / "one"), str(tmp_path / "two"), "--png", str(png))
    assert compared.returncode == 0, compared.stderr
    assert "| ab (one) |" in compared.stdout and "| ab (two) |" in compared.stdout
    assert png.read_bytes().startswith(b"\x89PNG")


def test_bad_options_fail_clearly(tmp_path: Path) -> None:
    done = loadtest("--target", "http://127.0.0.1:9", "--route", "x", "--prompt-tokens", "9-2",
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "prompt tokens: expected N or LO-HI" in done.stderr
    missing = loadtest("compare", str(tmp_path))
    assert missing.returncode == 2 and "not a load-test summary" in missing.stderr
    for option, value, said in [
        ("--max-tokens", "0", "max tokens: expected N or LO-HI with 1 <= LO <= HI"),
        ("--step-users", "0", "--step-users must be ≥ 1"),
        ("--timeout", "-1", "--timeout must be > 0"),
        ("--duration", "inf", "a run is bounded"),  # it used to run until killed
        ("--duration", "nan", "a run is bounded"),
    ]:
        refused = loadtest(
            "--target", "http://127.0.0.1:9", "--route", "x", option, value, "--out", str(tmp_path)
        )
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    no_folder = loadtest("--target", "http://127.0.0.1:9", "--route", "x", "--out", str(a_file / "run"))
    assert no_folder.returncode == 2 and f"--out {a_file / 'run'}: " in no_folder.stderr  # not a traceback


def test_a_wrong_route_or_a_dead_target_fails_before_any_load(split: Launched, tmp_path: Path) -> None:
    """Not a load test: CI must be able to tell, and the gateway takes no load for it."""
    before = _counts(split.url, "ab")
    done = loadtest("--target", split.url, "--route", "nope", "--users", "1", "--duration", "1s",
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"{split.url} does not serve the route 'nope'; it serves: ab" in done.stderr
    dead = loadtest("--target", "http://127.0.0.1:9", "--route", "ab", "--users", "1", "--duration", "1s",
                    "--out", str(tmp_path))  # fmt: skip
    assert dead.returncode == 1 and "cannot reach http://127.0.0.1:9" in dead.stderr
    assert _counts(split.url, "ab") == before


def test_a_run_where_every_request_fails_exits_1(split: Launched, tmp_path: Path) -> None:
    """Listed but failing (here: its only variant's server is down, every request a 503)."""
    done = loadtest("--target", split.url, "--route", "dead", "--users", "1",
                    "--duration", "1s", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 1 and "every request failed (http_503 " in done.stderr, done.stderr[-2000:]
    said = json.loads((tmp_path / "summary.json").read_text())["overall"]["error_examples"]["http_503"]
    assert "unavailable" in said.lower() or "connect" in said.lower(), said  # the gateway's own words
    assert f"; the first http_503 said: {said}" in done.stderr
    assert f"- first http_503: {said}" in (tmp_path / "summary.md").read_text()


def test_requests_that_wait_out_the_timeout_are_counted_as_timeouts(tmp_path: Path) -> None:
    """Not as "connection" errors: a slow gateway must not read as a down one."""
    with FaultServer(default="latency=2000", model="slow") as slow:
        done = loadtest("--target", slow.url, "--route", "slow", "--users", "1", "--duration", "2s",
                        "--timeout", "0.5", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 1 and "every request failed (timeout " in done.stderr, done.stderr[-2000:]


def test_terminating_a_run_stops_its_locust_too(tmp_path: Path) -> None:
    """SIGTERM used to leave locust orphaned and still loading the target."""
    with FaultServer(model="m") as target:
        cmd = [sys.executable, "-m", "serving.cli", "loadtest", "--target", target.url, "--route", "m",
               "--users", "2", "--duration", "60s", "--out", str(tmp_path)]  # fmt: skip
        running = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while target.stats()["requests"] == 0:  # locust is loading it
                assert time.monotonic() < deadline and running.poll() is None
                time.sleep(0.2)
            running.terminate()
            running.wait(timeout=20)
            time.sleep(1.0)
            before = target.stats()["requests"]
            time.sleep(1.5)
            assert target.stats()["requests"] == before  # nothing loads it any more
        finally:
            running.kill()


def test_a_target_that_goes_down_mid_run_fails_it_and_its_users_back_off(tmp_path: Path) -> None:
    """Closed-loop users with no wait used to spin ~5,000 refusals a second at a dead target (and
    the run exited 0 if enough answers came before); now each backs off up to 1 s, and any request
    with no answer at all fails the run."""
    cmd = [sys.executable, "-m", "serving.cli", "loadtest", "--users", "2", "--duration", "4s",
           "--route", "m", "--out", str(tmp_path)]  # fmt: skip
    with FaultServer(reply="a b c", model="m") as target:
        run = subprocess.Popen([*cmd, "--target", target.url], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        # down once it has answered for a while: a fixed 2 s was at times over before locust's
        # first request on a loaded host (every request then refused)
        deadline = time.monotonic() + 60
        while target.stats()["requests"] < 200:
            assert time.monotonic() < deadline and run.poll() is None, "the run never loaded the target"
            time.sleep(0.05)
    _, stderr = run.communicate(timeout=120)
    rows = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    refused = [row for row in rows if row["error"] == "connection"]
    assert run.returncode == 1 and "requests got no answer at all (connection refused or reset" in stderr
    assert 2 <= len(refused) <= 60, len(refused)  # ~2 s down, 2 users backing off 0.05 s .. 1 s
    assert len(rows) - len(refused) > 100  # it answered before it went


def test_a_gateway_that_dies_mid_run_still_has_its_accelerator_in_the_summary(tmp_path: Path) -> None:
    """The variants' facts (what cost per million tokens is computed from) were read from
    /metrics only once the run had ended: a gateway that died during it left them unknown."""
    with gateway_process() as gateway:
        cmd = [sys.executable, "-m", "serving.cli", "loadtest", "--target", gateway.url, "--users", "2",
               "--duration", "4s", "--route", "turnout-tiny", "--max-tokens", "4",
               "--out", str(tmp_path)]  # fmt: skip
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        records = tmp_path / "records.jsonl"
        while not (records.exists() and records.stat().st_size > 2000):  # it is answering
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.2)
        os.kill(gateway.pid, signal.SIGKILL)
        _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr[-2000:]  # requests with no answer fail the run
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["variants"]["turnout-tiny"]["accelerator"] == "cpu-x86", summary["variants"]


CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
# What a 200 answers to a streamed request, per case; HTTP/1.0, so each body ends at the close.
BAD_ANSWERS = {
    "not json": ("application/json", b"not json at all"),
    "only [DONE]": ("text/event-stream", b"data: [DONE]\n\n"),
    "cut before [DONE]": ("text/event-stream", CHUNK),
    "no usage": ("text/event-stream", CHUNK * 3 + b"data: [DONE]\n\n"),
}


@pytest.fixture
def answering() -> Iterator[Callable[[str], str]]:
    """A server answering every completion 200 with the named case of BAD_ANSWERS; returns its URL."""
    servers = []

    def start(case: str) -> str:
        content_type, body = BAD_ANSWERS[case]

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self) -> None:
                listed = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b""
                self.send_response(200 if listed else 404)
                self.end_headers()
                self.wfile.write(listed)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("case", "kind"),
    [("not json", "bad_response"), ("only [DONE]", "bad_response"), ("cut before [DONE]", "connection")],
)
def test_a_streamed_200_that_is_no_answer_is_an_error(
    answering: Callable[[str], str], tmp_path: Path, case: str, kind: str
) -> None:
    """Each of these used to count as a success (0 errors, exit 0); --no-stream said bad_response."""
    done = loadtest("--target", answering(case), "--route", "m", "--users", "1", "--duration", "1s",
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 1 and f"every request failed ({kind} " in done.stderr, done.stderr[-2000:]


def test_a_stream_without_usage_counts_its_chunks_and_says_so(
    answering: Callable[[str], str], tmp_path: Path
) -> None:
    done = loadtest("--target", answering("no usage"), "--route", "m", "--users", "1", "--duration", "1s",
                    "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    overall = json.loads((tmp_path / "summary.json").read_text())["overall"]
    assert overall["errors"] == 0 and overall["output_tokens"] == 3 * overall["requests"] > 0
    assert overall["output_tokens_estimated"] == overall["requests"]
    assert "Output tokens estimated for" in (tmp_path / "summary.md").read_text()
