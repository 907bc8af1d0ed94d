#!/usr/bin/env bash
# README command 1: set up, then train the quickstart recipe into runs/quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/accel train quickstart --out runs/quickstart "$@"
