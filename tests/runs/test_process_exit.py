"""A process that has saved and said everything ends as Python would, less the teardown that crashed ranks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = """
import atexit, threading, time
from accel.runs.process_exit import exit_without_teardown

class Freed:
    def __del__(self):
        print("torn down", flush=True)

kept = Freed()  # a module global: freed only by the teardown
atexit.register(lambda: print("exit handler", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined", flush=True))).start()
print("unflushed", end="")
exit_without_teardown(3)
"""


@pytest.mark.slow
def test_it_joins_threads_runs_exit_handlers_and_flushes_but_skips_the_teardown():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["unflushedthread joined", "exit handler"]
