"""The Triton python-backend entry point of every model here; the work is done in ``deploy/triton_repo``.

One file for all of them: :func:`deploy.triton_repo.stage_repository` writes it as each python-backend
model's ``1/model.py`` (Triton wants a file in each model's version folder), and
``deploy.render.triton`` into a rendered repository.

Runs inside ``tritonserver``'s python-backend stub (the engine end of the request path).
It puts the project root (model-config parameter ``project_root``, relative to this model's
folder unless absolute) on ``sys.path`` and hands every call to the class named by the
``python_class`` parameter (``module:Class``), built with Triton's ``initialize`` arguments.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = json.loads(args["model_config"]).get("parameters", {})
        root = str((Path(args["model_repository"]) / params["project_root"]["string_value"]).resolve())
        if root not in sys.path:
            sys.path.insert(0, root)
        module, _, name = params["python_class"]["string_value"].partition(":")
        self.impl: Any = getattr(importlib.import_module(module), name)(args)

    def execute(self, requests: list[Any]) -> Any:
        return self.impl.execute(requests)

    def finalize(self) -> None:
        self.impl.finalize()
