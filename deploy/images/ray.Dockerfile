# turnout-ray:0.1.0-cpu - Ray 2.60 with Turnout installed: the image of every pod of the KubeRay
# RayService that `turnout deploy render --target k8s` writes (head, gateway and embedded-engine
# workers). Build it from the repository root:
#
#   docker build -f deploy/images/ray.Dockerfile -t turnout-ray:0.1.0-cpu .
#
# RAY_VERSION must match the RayService's rayVersion (deploy/render/common.py RAY_VERSION).
# The embedded engine there reads its weights from /models/<name> (the turnout-models volume).

ARG RAY_VERSION=2.60.0

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY serving serving
COPY backends backends
COPY deploy deploy
COPY loadtests loadtests
COPY evals evals
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM rayproject/ray:${RAY_VERSION}-py311-cpu
COPY --from=wheel --chown=ray:users /wheels /tmp/wheels
RUN pip install --no-cache-dir "$(ls /tmp/wheels/turnout-*.whl)[ray,postgres]" \
    && rm -rf /tmp/wheels
