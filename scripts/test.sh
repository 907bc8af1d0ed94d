#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CPU; GPU tests skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check accel scripts benchmarks tests examples
.venv/bin/ruff format --check accel scripts benchmarks tests examples
# two pytest processes share the suite (pytest-xdist): most slow tests wait on the processes they start, so one
# core sat idle; a file's tests stay together (--dist loadfile), so its module fixtures are built once.
# ACCEL_TEST_PROCESSES=0 runs it in one process.
.venv/bin/python -m pytest -n "${ACCEL_TEST_PROCESSES:-2}" --dist loadfile "$@"
