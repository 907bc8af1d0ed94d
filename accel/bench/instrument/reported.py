"""Metrics a plain loop reports without a framework: the lines it prints, read by the bench's `--metric-pattern`
regular expressions (nanoGPT prints `step 250: train loss 1.9, val loss 2.0`), and the scalars it writes through
TensorBoard's `SummaryWriter`. Each value reaches the recorder's `logged`, as a framework's logged metric does."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import recorder

Logged = Callable[[dict[str, Any]], None]


def watch_printed(patterns: tuple[str, ...], logged: Logged) -> None:
    """From now on every line the script writes to stdout or stderr is matched against `patterns`: each named
    group that matched is a metric, its text the value."""
    compiled = [re.compile(p) for p in patterns]
    sys.stdout = _Lines(sys.stdout, compiled, logged)
    sys.stderr = _Lines(sys.stderr, compiled, logged)


def attach_tensorboard(module: ModuleType) -> None:
    """`torch.utils.tensorboard.writer` is imported: `add_scalar(tag, value)` is the metric `tag`."""

    def add_scalar(original, writer, tag, scalar_value, *args, **kwargs):
        if recorder.RECORDER is not None:
            recorder.RECORDER.logged({tag: scalar_value})
        return original(writer, tag, scalar_value, *args, **kwargs)

    recorder.patch(module.SummaryWriter, "add_scalar", add_scalar)


class _Lines:
    """A text stream that writes through and hands each complete line's matches to `logged`."""

    def __init__(self, stream: Any, patterns: list[re.Pattern], logged: Logged):
        self._stream, self._patterns, self._logged, self._partial = stream, patterns, logged, ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._read(line)
        return written

    def _read(self, line: str) -> None:
        values = {}
        for pattern in self._patterns:
            match = pattern.search(line)
            if match:
                values |= {name: _number(text) for name, text in match.groupdict().items() if text is not None}
        values = {name: value for name, value in values.items() if value is not None}
        if values:
            self._logged(values)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self._stream, name)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
