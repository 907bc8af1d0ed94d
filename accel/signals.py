"""SIGINT/SIGTERM as a request to stop cleanly: the loop finishes its step, checkpoints and returns."""
from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("accel")


@contextmanager
def stop_requests(on_signal: Callable[[int], None]) -> Iterator[None]:
    """Route SIGINT and SIGTERM to `on_signal(signum)` inside the block, and restore the old handlers after."""
    def handle(signum, _frame):
        log.warning("received signal %d: stopping after this step and saving a checkpoint", signum)
        on_signal(signum)

    try:
        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals stay with the caller
        previous = {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
