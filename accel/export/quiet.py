"""Keep third-party progress chatter out of accel's log while their code runs, then restore it."""

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
