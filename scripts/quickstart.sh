#!/usr/bin/env bash
# README command 1: set up what the quickstart needs (accel and its core dependencies: the recipe imports no extra),
# then train the quickstart recipe into runs/quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh core
.venv/bin/accel train quickstart --out runs/quickstart "$@"
