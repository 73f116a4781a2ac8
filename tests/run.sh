#!/usr/bin/env bash
# The whole test suite on a fresh machine: install, lint, type-check, test.
# This is the README's test command; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev,model]'
ruff check serving backends deploy loadtests evals tests bench
ruff format --check serving backends deploy loadtests evals tests
mypy --strict serving backends deploy
python3 -m pytest -q "$@"
