"""``create_app(freeze_heap=True)``: once started, the app's long-lived objects leave the GC's sight.

The app is started in-process through its own lifespan (an OpenAI-compatible variant whose
session opens no connection until a request comes), so no server is needed.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from serving.app import create_app
from serving.config import GatewayConfig


def _config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "variants": {
                "up": {
                    "kind": "openai_http",
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "m",
                    "engine": "vllm",
                }
            },
            "routes": {"chat": {"targets": [{"variant": "up"}]}},
            "store": {"url": f"sqlite:///{tmp_path / 'routes.db'}"},
        }
    )


@pytest.mark.parametrize("freeze", [False, True])
async def test_freeze_heap_after_start(tmp_path: Path, freeze: bool) -> None:
    gc.unfreeze()
    app = create_app(_config(tmp_path), freeze_heap=freeze)
    try:
        async with app.router.lifespan_context(app):
            frozen = gc.get_freeze_count()
            if freeze:
                # Everything alive at start-up, the app's own objects among them: a full
                # collection no longer walks them.
                assert frozen > 10_000
                assert all(obj is not app.state for obj in gc.get_objects())
            else:
                assert frozen == 0
                assert any(obj is app.state for obj in gc.get_objects())
    finally:
        gc.unfreeze()  # this test process is not the app's alone
