"""How long this process took to get to training: `startup_s` in summary.json."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_age_s() -> float:
    """Seconds since the operating system started this process (interpreter start-up and imports included).

    On Linux from /proc: the process's start tick and the uptime are read on the same boot clock, exact to a tick
    (10 ms). Elsewhere psutil's creation time against the wall clock, which can be off by up to a second where the
    system's boot time is kept in whole seconds.
    """
    try:
        started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        age = float(Path("/proc/uptime").read_text().split()[0]) - started / os.sysconf("SC_CLK_TCK")
        if age >= 0:
            return age
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc (macOS, Windows) or an unexpected layout
        pass
    import psutil

    return max(time.time() - psutil.Process().create_time(), 0.0)
