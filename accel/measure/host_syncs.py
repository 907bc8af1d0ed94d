"""The host-device syncs of a stretch of CUDA work, each counted under the line that asked for it.

`torch.cuda.set_sync_debug_mode("warn")` makes torch warn at every operation that makes the CPU wait for the
GPU (`.item()`, `.cpu()`, `.tolist()`, `bool(tensor)`, a boolean-mask index, a blocking copy). The warning is
issued while the Python caller is still on the stack, so the stack names the line; torch's own frames and the
standard library's are passed over to reach the code that called them. Syncs asked for by accel's own code (the
GradScaler's skip check, `train.sync_every_step`) are by design and left out.
"""

from __future__ import annotations

import sys
import sysconfig
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text (c10/cuda/CUDAFunctions.cpp)
_TORCH = str(Path(torch.__file__).resolve().parent)
_ACCEL = str(Path(__file__).resolve().parent)
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
_SELF = str(Path(__file__).resolve())
_resolved: dict[str, str] = {}


@contextmanager
def on_cuda(into: Counter) -> Iterator[None]:
    """Count into `into` ("file:line in function" -> times) the syncs of the CUDA work done inside."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with named(into):
            yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


@contextmanager
def named(into: Counter) -> Iterator[None]:
    """Count each sync warning issued inside under its asker's line, instead of showing it; other warnings pass."""
    with warnings.catch_warnings():  # restores the filters and showwarning on the way out
        warnings.filterwarnings("always", message=SYNC_WARNING)  # every sync, not once per line
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if SYNC_WARNING not in str(message):
                return shown(message, category, filename, lineno, file, line)
            where = asker(sys._getframe(1))
            if where is not None:
                into[where] += 1

        warnings.showwarning = show
        yield


def asker(frame) -> str | None:
    """ "file:line in function" of the innermost frame outside torch and the standard library; None when that
    frame is accel's own code."""
    while frame is not None:
        path = _real(frame.f_code.co_filename)
        if not (path == _SELF or path.startswith(_TORCH) or _stdlib(path)):
            if path.startswith(_ACCEL):
                return None
            return f"{_short(path)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


def _stdlib(path: str) -> bool:
    # a system Python keeps site-packages (user code, torch) under the standard library's folder
    return path.startswith(_STDLIB) and "-packages" not in path


def _real(filename: str) -> str:
    if filename not in _resolved:
        _resolved[filename] = str(Path(filename).resolve())
    return _resolved[filename]


def _short(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
