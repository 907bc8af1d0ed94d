"""Ending a process whose work is saved and said without the interpreter's teardown.

Python's exit joins the threads, runs the exit handlers, flushes the output, and then tears the modules down,
freeing what is left in no set order. In a process that used torch.distributed that last part crashed now and
then, after the run had written everything: gloo's threads outliving their group ("terminate called without an
active exception", SIGABRT), or a C++ object's finalizer failing while Python printed "Exception ignored in:".
The first three steps are kept; the teardown has nothing left to save."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def finish_like_python() -> None:
    """Python's exit up to the teardown: non-daemon threads joined, exit handlers run, the output flushed."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()


def exit_without_teardown(code: int) -> NoReturn:
    try:
        finish_like_python()
    finally:
        os._exit(code & 0xFF)
