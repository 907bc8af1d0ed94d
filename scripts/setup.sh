#!/usr/bin/env bash
# Create .venv and install accel with the exact versions known to work on the build machines.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[data,export,dali,hf,lightning,timm,peers,trackers,dev]'
