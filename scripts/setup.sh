#!/usr/bin/env bash
# Create .venv and install accel with the exact versions known to work on the build machines (constraints.txt pins
# every extra). Takes the extras to install, comma-separated, or `core` for none (the quickstart imports none);
# without one, every extra the tests use (scripts/test.sh, CI). A command that needs an extra not installed says
# which, with its pip command.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST_EXTRAS=data,export,dali,hf,lightning,timm,peers,trackers,tune,dev
EXTRAS=${1:-$TEST_EXTRAS}
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ "$EXTRAS" = core ]; then
  target=.
else
  target=".[$EXTRAS]"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e "$target"
