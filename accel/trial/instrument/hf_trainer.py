"""The Hugging Face Trainer, read from inside: every `Trainer` the script builds gets accel's `TrainerCallback`.

The recorder counts and times the steps as for any loop (the Trainer steps a torch optimizer); the callback adds
what only the Trainer knows: when training began (start-up ends there), its logged metrics (`loss`, `eval_loss`,
...: targets and the results-changed flag), its checkpoint writes (timed apart), the speed flags it was given (the
probe's answer, for `--ablate`), and a clean stop (`control.should_training_stop`) once the trial has its steps.
A probe's or trial's checkpoints and logs go to a folder of its own, never to the script's `output_dir`, and its
steps are told to the guard (accel/trial/instrument/guard.py), whether or not the recorder started.
"""

from __future__ import annotations

import tempfile
from types import ModuleType
from typing import Any

from transformers import TrainerCallback

from . import guard, recorder

# the Trainer's own speed flags, as TrainingArguments names them (`--bf16 True`, `--optim adamw_torch_fused`)
FLAGS = (
    "bf16",
    "fp16",
    "tf32",
    "torch_compile",
    "optim",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "gradient_checkpointing",
    "use_liger_kernel",
)


def attach(module: ModuleType) -> None:
    """`transformers.trainer` is imported: every Trainer made from now on carries the callback, its checkpoint
    writes are timed apart, and whether the script parses TrainingArguments from its command line is noted."""
    from transformers import HfArgumentParser

    guard.hook_torch()
    recorder.patch(module.Trainer, "__init__", _init)
    recorder.patch(module.Trainer, "_save_checkpoint", recorder.timed_save)
    recorder.patch(HfArgumentParser, "parse_args_into_dataclasses", _parse)


def _init(init, trainer, *args, **kwargs):
    init(trainer, *args, **kwargs)
    trainer.add_callback(ScratchCallback(trainer.args))
    if recorder.RECORDER is not None and recorder.RECORDER.active:
        trainer.add_callback(TrialCallback(recorder.RECORDER, trainer))


def _parse(parse, parser, *args, **kwargs):
    """A script that parses TrainingArguments from its command line takes the Trainer's flags as its own options,
    which a variant can set."""
    from transformers import TrainingArguments

    if any(issubclass(kind, TrainingArguments) for kind in parser.dataclass_types):
        recorder.FACTS["command_line"] = True
    return parse(parser, *args, **kwargs)


class ScratchCallback(TrainerCallback):
    """The Trainer's outputs in a folder of the process's own, its steps told to the guard: both apart from the
    recorder, which may not have started."""

    def __init__(self, args: Any):
        self._scratch = tempfile.TemporaryDirectory(prefix="accel-trial-hf-")  # removed when the process ends
        args.output_dir = self._scratch.name
        if hasattr(args, "logging_dir"):
            args.logging_dir = self._scratch.name

    def on_step_end(self, args, state, control, **kwargs):
        guard.stepped("the HF Trainer's callback")


class TrialCallback(TrainerCallback):
    def __init__(self, rec: recorder.Recorder, trainer: Any):
        self.recorder = rec
        rec.framework_stops = True
        args = trainer.args
        flags = {name: getattr(args, name) for name in (*FLAGS, "use_cpu") if hasattr(args, name)}  # this version's
        recorder.FACTS |= {"framework": "hf", "flags": flags}

    def on_train_begin(self, args, state, control, **kwargs):
        self.recorder.training_began()
        recorder.FACTS["run_steps"] = state.max_steps or None  # from --max_steps, or the epochs over the loader

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.recorder.logged(logs or {})

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.recorder.logged(metrics or {})

    def on_step_end(self, args, state, control, **kwargs):
        if self.recorder.stop_requested:
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder.stop_requested:
            guard.end()
