"""Keep chatter out of the log while some code runs (third-party progress notes, or accel's own notes on a stand-in
or a plan), then restore it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_logs(*names: str, level: int = logging.WARNING) -> Iterator[None]:
    """Raise the named loggers ("" is the root logger) to `level` for the block; their old levels come back."""
    loggers = [logging.getLogger(name or None) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in zip(loggers, before):
            logger.setLevel(old)
