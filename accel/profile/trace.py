"""The profiled steps as a Chrome trace, gzipped: every op on its thread and stream, in time."""

from __future__ import annotations

from pathlib import Path

from .window import Profiled

TRACE = "trace.json.gz"


def write_trace(profiled: Profiled, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TRACE
    profiled.profiler.export_chrome_trace(str(path))  # a name ending in .gz is written gzipped
    return path
