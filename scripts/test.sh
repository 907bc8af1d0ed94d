#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CPU; GPU tests skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check accel scripts benchmarks tests examples
.venv/bin/ruff format --check accel scripts benchmarks tests examples
.venv/bin/python -m pytest "$@"
