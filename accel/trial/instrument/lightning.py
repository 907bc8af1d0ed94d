"""The Lightning `Trainer`, read from inside: every Trainer the script builds gets accel's callback, first.

The recorder counts and times the optimizer steps as for any loop (Lightning steps a torch optimizer); the callback
adds what only the Trainer knows: the batch of each training step (Lightning calls `training_step`, not always the
module's forward), when training began, its validation (timed apart), its logged metrics (`trainer.callback_metrics`:
`val_loss`... for targets and the results-changed flag), its checkpoint writes, its precision (the probe's answer,
for `--ablate` of a LightningCLI script) and a clean stop (`trainer.should_stop`) once the trial has its steps.

A probe's or trial's logs, checkpoints and LightningCLI's `config.yaml` go to a folder of its own, never the
script's, and its training batches are told to the guard (accel/trial/instrument/guard.py), whether or not the
recorder started: accel joins `Trainer.__init__` rather than Lightning's `callbacks_factory` entry point because
that one's callbacks come after the script's, and LightningCLI's `SaveConfigCallback` writes into the run's folder
at setup, before them.
"""

from __future__ import annotations

import functools
import importlib
import math
import tempfile
from types import ModuleType
from typing import Any

from . import guard, recorder

DIRECTORIES = ("_root_dir", "_save_dir")  # where TensorBoardLogger and CSVLogger write (their own attributes)


def attach_trainer(module: ModuleType) -> None:
    """`lightning.pytorch.trainer.trainer` (or `pytorch_lightning`'s) is imported: every Trainer made from now on
    carries the callback, and its checkpoint writes are timed apart."""
    guard.hook_torch()
    recorder.patch(module.Trainer, "__init__", functools.partial(_init, _package(module)))
    recorder.patch(module.Trainer, "save_checkpoint", recorder.timed_save)


def attach_cli(module: ModuleType) -> None:
    """A LightningCLI script takes the Trainer's flags on its command line (`--trainer.precision`)."""

    def init(original, cli, *args, **kwargs):
        recorder.FACTS["command_line"] = True
        return original(cli, *args, **kwargs)

    recorder.patch(module.LightningCLI, "__init__", init)


def attach_fabric(module: ModuleType) -> None:
    """A Fabric script's steps are the recorder's; what it logs (`fabric.log`, `fabric.log_dict`) is its metrics."""

    def log_dict(original, fabric, metrics, *args, **kwargs):
        if recorder.RECORDER is not None:
            recorder.RECORDER.logged(metrics)
        return original(fabric, metrics, *args, **kwargs)

    recorder.patch(module.Fabric, "log_dict", log_dict)


def _package(module: ModuleType) -> str:
    """`lightning.pytorch` or `pytorch_lightning`: the package the script's Trainer is from."""
    return module.__name__.removesuffix(".trainer.trainer")


def _init(package: str, init, trainer, *args, **kwargs) -> None:
    init(trainer, *args, **kwargs)
    callback_base = importlib.import_module(package).Callback  # imported whole by now, not while it is attached
    rec = recorder.RECORDER
    if rec is not None and rec.active:
        trainer.callbacks.insert(0, _callback_class(callback_base)(rec, trainer))
    trainer.callbacks.insert(0, _scratch_class(callback_base)(trainer))


def _scratch_class(base: type) -> type:
    class ScratchCallback(base):
        """The Trainer's outputs in a folder of the process's own, its batches told to the guard: both apart from
        the recorder, which may not have started."""

        def __init__(self, trainer: Any):
            self._scratch = tempfile.TemporaryDirectory(prefix="accel-trial-lightning-")  # gone when the process is
            _redirect(trainer, self._scratch.name)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            guard.stepped("Lightning's callback")  # a batch: at least one optimizer step's share

    return ScratchCallback


def _callback_class(base: type) -> type:
    class TrialCallback(base):
        def __init__(self, rec: recorder.Recorder, trainer: Any):
            self.recorder = rec
            rec.framework_stops = True
            rec.batches_counted = True  # by on_train_batch_start: training_step need not call the module's forward
            recorder.FACTS |= {"framework": "lightning", "flags": {"trainer.precision": str(trainer.precision)}}

        def on_train_start(self, trainer, pl_module):
            self.recorder.training_began()
            steps = trainer.estimated_stepping_batches  # from max_steps, or the epochs over the loader; inf: no end
            recorder.FACTS["run_steps"] = int(steps) if math.isfinite(steps) else None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.recorder.batch(batch)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.recorder.stop_requested:
                trainer.should_stop = True

        def on_validation_start(self, trainer, pl_module):
            self.recorder.evaluating()

        def on_validation_end(self, trainer, pl_module):
            if not trainer.sanity_checking:
                self.recorder.logged(trainer.callback_metrics)

        def on_train_end(self, trainer, pl_module):
            if self.recorder.stop_requested:
                guard.end()

    return TrialCallback


def _redirect(trainer: Any, scratch: str) -> None:
    """The trial's logs and checkpoints go to `scratch`: the default root, the loggers' folders, and a checkpoint
    callback's own `dirpath` where the script gave one."""
    trainer._default_root_dir = scratch
    for logger in trainer.loggers:
        for name in DIRECTORIES:
            if getattr(logger, name, None) is not None:
                setattr(logger, name, scratch)
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None) is not None:
            callback.dirpath = f"{scratch}/checkpoints"
