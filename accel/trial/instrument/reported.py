"""Metrics a plain loop reports without a framework: the lines it prints, read by the bench's `--metric-pattern`
regular expressions (nanoGPT prints `step 250: train loss 1.9, val loss 2.0`), and the scalars it logs through
TensorBoard's `SummaryWriter`, wandb or MLflow. Each value reaches the recorder's `logged`, as a framework's logged
metric does. A trial's tracking goes to folders of its own (accel.trial.files): it adds no run to the
user's TensorBoard logs, W&B project or MLflow server, and needs none of them to be reachable."""

from __future__ import annotations

import os
import pathlib
import re
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..files import FILES
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

    def init(original, writer, log_dir=None, *args, **kwargs):
        return original(writer, FILES.folder("tensorboard"), *args, **kwargs)

    def add_scalar(original, writer, tag, scalar_value, *args, **kwargs):
        _logged({tag: scalar_value})
        return original(writer, tag, scalar_value, *args, **kwargs)

    recorder.patch(module.SummaryWriter, "__init__", init)
    recorder.patch(module.SummaryWriter, "add_scalar", add_scalar)


def attach_wandb(module: ModuleType) -> None:
    """`wandb` is imported: each scalar a run logs is a metric; a run starts offline (unless disabled)."""

    def init(original, *args, **kwargs):
        if "disabled" not in (kwargs.get("mode"), os.environ.get("WANDB_MODE")):
            kwargs |= {"mode": "offline", "dir": FILES.folder("wandb")}  # init's arguments win over its settings
        return original(*args, **kwargs)

    def log(original, run, data, *args, **kwargs):
        _logged(data)
        return original(run, data, *args, **kwargs)

    recorder.patch(module, "init", init)
    recorder.patch(module.sdk.wandb_run.Run, "log", log)


def attach_mlflow(module: ModuleType) -> None:
    """`mlflow` is imported: each metric logged, fluently or through a client, is a metric; every client and the
    fluent API track to a store in the trial's folder, whatever URI the script names."""
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # a throwaway store: MLflow refuses new file stores otherwise
    uri = pathlib.Path(FILES.folder("mlflow"), "mlruns").as_uri()  # a store made where none is: its default experiment
    client = module.tracking.client.MlflowClient

    def init(original, self, tracking_uri=None, *args, **kwargs):
        return original(self, uri, *args, **kwargs)

    def log_metric(original, self, run_id, key, value, *args, **kwargs):
        _logged({key: value})
        return original(self, run_id, key, value, *args, **kwargs)

    def log_batch(original, self, run_id, metrics=(), *args, **kwargs):
        _logged({metric.key: metric.value for metric in metrics})
        return original(self, run_id, metrics, *args, **kwargs)

    def set_tracking_uri(original, *args, **kwargs):
        return original(uri)

    recorder.patch(client, "__init__", init)
    recorder.patch(client, "log_metric", log_metric)
    recorder.patch(client, "log_batch", log_batch)
    module.set_tracking_uri(uri)
    for owner in (module, module.tracking, module.tracking._tracking_service.utils):  # each holds its own name
        recorder.patch(owner, "set_tracking_uri", set_tracking_uri)


def _logged(values: dict[str, Any]) -> None:
    if recorder.RECORDER is not None:
        recorder.RECORDER.logged(values)


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
