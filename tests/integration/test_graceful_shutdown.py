"""What a gateway told to stop does to the requests its graceful shutdown leaves running.

uvicorn waits ``timeout_graceful_shutdown`` (5 s, `turnout serve`) for requests in flight, then
cancels them. A request still waiting for its answer got uvicorn's plain-text 500 (with an
"Exception in ASGI application" traceback in the log), and a stream was cut mid-body with no
error event and no ``[DONE]`` (QA, 400 streams and SIGTERM or SIGINT). Now a waiting request
gets a 503 in the OpenAI shape with Retry-After, and a stream ends with an error event and
``[DONE]``, as any failed stream does (a Responses API stream with its ``response.failed``).
The upstreams are fault servers slower than the grace.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from backends.fault import FaultServer
from tests.integration.control_plane import fault_variant, running_gateway, write_config


def test_requests_left_at_shutdown_get_a_503_or_an_error_event(tmp_path: Path) -> None:
    with (
        FaultServer(default="latency=20000") as hanging,
        FaultServer(default="slow_chunks=300", reply="word " * 200, chunks=200) as trickling,
    ):
        config = write_config(
            tmp_path / "gateway.yaml",
            {"hanging": fault_variant(hanging, 30.0), "trickling": fault_variant(trickling, 30.0)},
            {
                "hanging": {"targets": [{"variant": "hanging"}]},
                "trickling": {"targets": [{"variant": "trickling"}]},
            },
        )
        answers: dict[str, Any] = {}

        def ask(name: str, model: str, stream: bool) -> None:
            body: dict[str, Any] = {"model": model, "stream": stream}
            if name == "responding":  # the Responses API: typed events, no [DONE]
                path, body["input"] = "/v1/responses", "hi"
            else:
                path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": "hi"}]
            with httpx.stream("POST", f"{url}{path}", json=body, timeout=30) as reply:
                answers[name] = (reply.status_code, reply.headers, reply.read())

        with running_gateway(config) as gateway:
            url = gateway.url
            askers = [
                threading.Thread(target=ask, args=("waiting", "hanging", False)),
                threading.Thread(target=ask, args=("streaming", "trickling", True)),
                threading.Thread(target=ask, args=("responding", "trickling", True)),
            ]
            for asker in askers:
                asker.start()
            time.sleep(1.0)  # both in flight: one waiting for its answer, one streaming
            os.kill(gateway.pid, signal.SIGTERM)
            for asker in askers:
                asker.join(timeout=20)
            log = gateway.log.read_text() if gateway.log is not None else ""

    status, headers, body = answers["waiting"]
    assert status == 503 and headers["retry-after"] == "1", body
    assert json.loads(body)["error"]["code"] == "shutting_down"
    status, _, body = answers["streaming"]
    events = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]", events[-3:]
    assert json.loads(events[-2])["error"]["code"] == "shutting_down"
    assert len(events) > 3  # it had streamed a while before the end
    status, _, body = answers["responding"]  # ends as a failed response, numbered on
    typed = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]
    assert status == 200 and typed[-1]["type"] == "response.failed", typed[-2:]
    assert typed[-1]["response"]["error"]["code"] == "shutting_down"
    assert [event["sequence_number"] for event in typed] == list(range(len(typed)))
    assert len(typed) > 4 and b"[DONE]" not in body
    assert "Exception in ASGI application" not in log
