"""The suite's waits on processes (conftest): bounded by a process's progress, not by a clock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import finish


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_process_that_keeps_working_is_waited_for_past_the_stall_limit():
    busy = _python("import time\nend = time.time() + 3\nwhile time.time() < end: pass\nprint('done')")
    out, _ = finish(busy, stall_s=1.5)  # 3 s of work: longer than the stall limit, never idle that long
    assert busy.returncode == 0 and out.strip() == "done"


@pytest.mark.slow
def test_a_process_that_stops_working_fails_the_wait_and_is_killed():
    hung = _python("import time\ntime.sleep(60)")
    with pytest.raises(pytest.fail.Exception, match="used no CPU time for"):
        finish(hung, stall_s=1.5)
    assert hung.wait(timeout=10) != 0  # killed, not left running
