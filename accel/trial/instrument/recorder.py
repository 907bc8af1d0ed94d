"""The instrument's recorder: an unchanged script's optimizer steps, counted and timed from torch's own hooks.

- **Steps**: `torch.optim.optimizer.register_optimizer_step_post_hook` fires after every optimizer's step, wrapped
  by Accelerate, Lightning or a GradScaler or not. The first optimizer to step is the step clock; another one (a
  GAN's second) steps inside the same training step. A step skipped by a GradScaler (inf gradients) is not one.
- **Samples**: at the first step the recorder finds the trained model (the outermost modules that hold the most of
  the clock's parameters, never inside a compiled module) and hooks its forward: a training forward counts the
  leading dimension of its first input (and tokens, where that input is token ids), as the engine does. The first
  step, counted before the hook, is always a warm-up step.
- **What is not a training step**: a forward in eval mode or without gradients opens an evaluation, which the next
  training forward or step closes; `torch.save` is a checkpoint write. Both are timed apart (`eval_s`, `save_s`)
  and taken out of the step they fall in; a `DataLoader`'s batches are the data wait.
- **Loss**: every scalar `torch.autograd.backward` (`loss.backward()`) is recorded as a device tensor, unscaled
  where a GradScaler scaled it, and read once at the end: no device sync in the step.
- **A closure's re-evaluations** (`optimizer.step(closure)`: LBFGS's line search runs the closure up to `max_iter`
  times) re-run the step's batch: inside a step, the forward and loss of its first backward count, the rest not, as
  LBFGS itself returns its first evaluation's loss (Lightning runs every training step in a closure: one a step).

After warm-up + N steps, and with a window by time not before they hold its seconds (accel.engine.trial_variables,
accel.bench.trial_figures.TimedWindow), it writes the trial record and ends the process.
"""

from __future__ import annotations

import atexit
import functools
import gc
import numbers
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from ... import devices
from ...batches import leading_tensor
from ...bench.pruner import Deadline, Pruned
from ...bench.trial_figures import TimedWindow
from ...engine import trial_variables
from ...io import strict_json, write_atomic
from ...measure import load
from ...measure.anatomy import Anatomy, compiled_in_place
from ...measure.flops import Utilisation, few_samples, forward_precision
from ...speedups.compile_workers import stop_compile_workers
from ..requested import Requested, requested
from . import guard, trial_record

if TYPE_CHECKING:
    from .profiled import UnchangedProfile

RECORDER: Recorder | None = None  # the process's one recorder, once torch is imported under a trial
# what a framework adapter learnt of the script: its name, its speed flags as given, and whether it takes them on its
# command line (instrument.hf_trainer, instrument.lightning)
FACTS: dict[str, Any] = {"framework": "plain"}


def install() -> None:
    """Start recording (called once torch is imported): the bench's trial, or its probe, or `accel profile`'s
    window."""
    global RECORDER
    if RECORDER is not None:
        return
    asked = requested()
    if asked is not None:
        RECORDER = Recorder(asked)
    elif os.environ.get(trial_variables.PROFILE):
        from . import profiled

        window = profiled.requested()
        if window is not None:
            nothing = Requested(
                path="", warmup=0, steps=0, probe=False, every_step=False, target=None, metric=None, stop=False
            )  # no record and no step count: the window ends the process
            RECORDER = Recorder(nothing, window)
    if RECORDER is not None:
        guard.recorder_started(RECORDER)


def timed_save(save: Callable, *args: Any, **kwargs: Any) -> Any:
    """A framework's checkpoint write (`patch`'s wrapper of the Trainer's own), timed apart by the recorder."""
    if RECORDER is None:
        return save(*args, **kwargs)
    return RECORDER.saving(save, *args, **kwargs)


def patch(owner: Any, name: str, wrapper: Callable) -> Callable[[], None]:
    """`owner.name` calls `wrapper(original, ...)` from now on (a function, so that a method still binds its
    instance); returns what puts the original back."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return wrapper(original, *args, **kwargs)

    setattr(owner, name, patched)
    return lambda: setattr(owner, name, original)


class Recorder:
    """The script's steps as the bench asked to see them (`asked`), counted from torch's hooks; the figures and
    records it writes are accel.trial.instrument.trial_record's."""

    def __init__(self, asked: Requested, profile: UnchangedProfile | None = None):
        self.path, self.steps, self.probe, self.every_step = asked.path, asked.steps, asked.probe, asked.every_step
        self.warmup = max(asked.warmup, 1)  # the first step's samples are counted before the model is known
        self.window, self.timed = asked.window, TimedWindow(asked.steps, asked.window)
        self.target, self.metric, self.stop_at_target = asked.target, asked.metric, asked.stop
        # tune's pruner (accel.bench.pruner)
        self.deadline = Deadline(asked.deadline, self.warmup) if asked.deadline is not None else None
        self.pruned: Pruned | None = None
        now, started = time.perf_counter(), psutil.Process().create_time()
        self.zero = now - (time.time() - started)  # the process's start on the perf_counter clock
        self.optimizer: torch.optim.Optimizer | None = None  # the step clock
        self.device = torch.device("cpu")
        self.models: list[torch.nn.Module] = []
        self.marks: list[dict[str, Any]] = []
        self.counts = {"samples": 0, "tokens": 0, "forwards": 0, "data_s": 0.0}
        self.losses: list[torch.Tensor] = []  # this step's, as device tensors
        self.step_losses: list[torch.Tensor | None] = []
        self.excluded_s = 0.0  # evaluation, checkpoint writes and the recorder's own search, out of the steps
        self.eval_s = self.save_s = 0.0
        self.eval_since: float | None = None  # an evaluation is open
        self.first_backward: float | None = None
        self.compiled_before_backward = 0.0  # a plain loop's first forward compiles before its start-up ends
        self.loader_seen = False
        self.depth = 0  # nesting of the hooked models' forwards (a wrapper calls the model it wraps)
        self.stepping = False  # inside an optimizer's step, where a closure may run
        self.reevaluating = False  # a closure ran forward and backward in this step already: its batch is counted
        self.scaled: tuple[torch.Tensor, torch.Tensor] | None = None  # a GradScaler's last (scaled, unscaled) loss
        self.done, self.failure, self.active = False, None, True
        self.began: float | None = None  # when a framework said training began: start-up ends there
        self.framework_stops = False  # a framework's callback ends the training once asked (`stop_requested`)
        self.batches_counted = False  # a framework's callback counts the training batches (`batch`)
        self.stop_requested = False
        self.metrics: dict[str, float] = {}  # the last value of each metric the script logged through a framework
        self.planned_metrics: dict[str, float] | None = None  # those at warm-up + N steps: every variant's count
        self.evals: list[dict[str, Any]] = []  # each logged value of the target's metric, as TargetClock's
        self.load = load.Window()  # the machine's load over the timed steps
        self.saving_depth = 0
        self.profile = profile  # `accel profile`'s window, over this clock (no record is written then)
        self.anatomy = Anatomy()  # the phases the profile times (free while no window is open)
        self.loader_workers: int | None = None  # the last DataLoader's workers: what the profile's advice weighs
        self.loader_facts: dict[str, Any] | None = None  # the first training DataLoader's, for the speed lint
        self.float64_batch: list[str] = []  # the first training forward's float64 inputs, for the speed lint
        self.precision: str | None = None  # the training forward's: the profile's advice and the MFU's peak
        self.flops_inputs: tuple[torch.nn.Module, Any] | None = None  # the first hooked training forward's
        self.utilisation = Utilisation()  # FLOPs counted on them as the record is written, after the timed steps
        self._inside: Any = None  # the one-shot hook that reads the precision inside the model's forward
        self._optimizer_phases: list[Any] = []  # open `optimizer` phases (a profile's), closed as each step ends
        self._undo: list[Callable[[], None]] = []
        self._hook()
        if asked.patterns:
            self._watch_printed(asked.patterns)
        self._excepthook = sys.excepthook
        sys.excepthook = self._crashed
        atexit.register(self._ended)

    # --- hooks ---------------------------------------------------------------------------------------------------

    def _hook(self) -> None:
        self._undo = [
            register_optimizer_step_pre_hook(self._stepping).remove,
            register_optimizer_step_post_hook(self._stepped).remove,
            patch(torch.autograd, "backward", self._backward),
            patch(torch, "save", self.saving),
            patch(torch.amp.GradScaler, "scale", self._scale),
            patch(torch.utils.data.dataloader._BaseDataLoaderIter, "__next__", self._next_batch),
        ]

    def _watch_printed(self, patterns: tuple[str, ...]) -> None:
        from . import reported

        streams = sys.stdout, sys.stderr
        reported.watch_printed(patterns, self.logged)
        self._undo.append(lambda: (setattr(sys, "stdout", streams[0]), setattr(sys, "stderr", streams[1])))

    def stand_down(self) -> None:
        self.active = False
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        sys.excepthook = self._excepthook

    def _backward(self, original, tensors, *args, **kwargs):
        if self.first_backward is None:
            self.first_backward = time.perf_counter()
            from ...speedups.compile import seconds_compiled  # once; not at the script's start

            self.compiled_before_backward = seconds_compiled()
        loss = tensors if isinstance(tensors, torch.Tensor) else None
        if loss is not None and loss.dim() == 0 and self.eval_since is None and not self.reevaluating:
            if self.scaled is not None and loss is self.scaled[0]:
                loss = self.scaled[1]
            self.losses.append(loss.detach().float())
            self.reevaluating = self.stepping
        self.scaled = None
        with self.anatomy.phase("backward"):
            return original(tensors, *args, **kwargs)

    def _scale(self, original, scaler, outputs):
        scaled = original(scaler, outputs)
        if isinstance(outputs, torch.Tensor):
            self.scaled = (scaled, outputs)
        return scaled

    def saving(self, save, *args, **kwargs):
        """A checkpoint write, timed apart (a framework's write holds torch.save calls: the outermost counts)."""
        self.saving_depth += 1
        start = time.perf_counter()
        try:
            return save(*args, **kwargs)
        finally:
            self.saving_depth -= 1
            if not self.saving_depth:
                spent = time.perf_counter() - start
                self.save_s += spent
                if self.eval_since is None:  # inside an evaluation it is out of the steps already
                    self.excluded_s += spent
                else:
                    self.eval_s -= spent

    def _next_batch(self, original, iterator):
        start = time.perf_counter()
        with self.anatomy.phase("data"):
            batch = original(iterator)
        self.loader_workers = iterator._num_workers
        if self.eval_since is None:
            self.counts["data_s"] += time.perf_counter() - start
            self.loader_seen = True
            if self.loader_facts is None:
                self.loader_facts = _loader_facts(iterator)
        return batch

    def _forward(self, module, args, kwargs) -> None:
        self.depth += 1
        if self.depth > 1:
            return
        if torch.is_grad_enabled() and module.training:
            self._close_eval()
            if not self.batches_counted and not self.reevaluating:
                self._count(args or tuple(kwargs.values()))
            if self.precision is None:  # once: a few samples copied, counted when the record is written
                from ...measure.lint import float64_batch

                self.precision = forward_precision(module, self.device)
                self.flops_inputs = module, few_samples(args, kwargs)
                self.float64_batch = float64_batch((args, kwargs))
        else:
            self.evaluating()

    def _count(self, inputs: Any) -> None:
        """A training micro-batch: its samples (the leading dimension of its first tensor) and tokens."""
        self.counts["forwards"] += 1
        leading = leading_tensor(inputs)
        if leading is not None:
            self.counts["samples"] += len(leading)
            if not leading.is_floating_point() and leading.dim() == 2:  # token ids
                self.counts["tokens"] += leading.numel()

    def _forwarded(self, module, args, output) -> None:
        self.depth -= 1

    def _close_eval(self) -> None:
        if self.eval_since is not None:
            spent = time.perf_counter() - self.eval_since
            self.eval_s += spent
            self.excluded_s += spent
            self.eval_since = None

    # --- what a framework tells ----------------------------------------------------------------------------------

    def batch(self, batch: Any) -> None:
        """A framework's training batch (counted here, not at the model's forward: `batches_counted`)."""
        self._close_eval()
        self._count(batch)

    def evaluating(self) -> None:
        if self.eval_since is None:
            self.eval_since = time.perf_counter()

    def training_began(self) -> None:
        if self.began is None:
            self.began = time.perf_counter()

    def logged(self, values: dict[str, Any]) -> None:
        """Metrics the script logged through its framework: the last of each, and the target's, timed from the
        process's start less its evaluations, as a recipe trial's time to target is."""
        numbers = _numbers(values)
        self.metrics |= numbers
        if not self.active or self.metric not in numbers:
            return
        self._close_eval()
        value = numbers[self.metric]
        wall_s = time.perf_counter() - self.zero - self.eval_s
        self.evals.append({"step": len(self.marks), "wall_s": wall_s, "value": value, "eval_s": self.eval_s})
        if self.stop_at_target and self.target.reached(value):
            self._finish()
        elif self.deadline is not None:
            self._prune(self.deadline.at_eval(self.target, self.evals, len(self.marks)))

    def _prune(self, stop: Pruned | None) -> None:
        """Ended short of the target, as at the target: the record says why."""
        if stop is not None:
            self.pruned = stop
            self._finish()

    def _finish(self) -> None:
        """Write the record (a profile wrote its report) and end: at once, or through the framework's own stop
        where it has one."""
        if self.profile is None:
            self._write_record()
        self.done = True
        self.active = False
        if not self.framework_stops:
            guard.end()
        self.stop_requested = True

    # --- steps ---------------------------------------------------------------------------------------------------

    def _stepping(self, optimizer, args, kwargs) -> None:
        """Before any optimizer's step: a closure it runs re-evaluates the step's batch; under a profile, its
        `optimizer` phase opens (closed in `_stepped`)."""
        self.stepping, self.reevaluating = True, False
        if self.profile is not None:
            self._optimizer_phases.append(self.anatomy.phase("optimizer"))
            self._optimizer_phases[-1].__enter__()

    def _stepped(self, optimizer, args, kwargs) -> None:
        self.stepping = self.reevaluating = False
        if self._optimizer_phases:
            self._optimizer_phases.pop().__exit__(None, None, None)
        if not self.active:
            return
        if self.optimizer is None:
            self.optimizer = optimizer
            self.device = _device(optimizer)
        elif optimizer is not self.optimizer:
            return
        self._close_eval()
        done = len(self.marks) + 1
        if self.every_step or done <= self.warmup:
            devices.synchronize(self.device)
        if done == self.warmup:
            stop_compile_workers()  # the script's torch.compile started a pool: its start is warm-up, not timed
            self.load.begin()  # before the mark: its own cost stays out of the timed steps
        now = time.perf_counter()
        if done == 1:
            self._find_models()
            if self.probe:
                self._write_given()
                guard.end()
            self.excluded_s += time.perf_counter() - now
        self.marks.append({"t": now - self.excluded_s, "wall": now, **self.counts})
        self.step_losses.append(torch.stack(self.losses).sum() if self.losses else None)
        self.losses = []
        if self.profile is not None and self.profile.stepped(self):
            self._finish()
        if self.steps and done == self.warmup + self.steps:
            self.planned_metrics = dict(self.metrics)
        if self.steps and done > self.warmup and self.timed.add(self.marks[-1]["t"] - self.marks[-2]["t"]):
            if not self.every_step:
                self._window_end()
            self._finish()
        elif self.deadline is not None and not self.done:
            self._prune(self.deadline.at_step(self.target, now - self.zero - self.eval_s, done))

    def _window_end(self) -> None:
        """The last step's mark moved to the device's end of the work the window's steps left queued."""
        devices.synchronize(self.device)
        waited = time.perf_counter() - self.marks[-1]["wall"]
        self.marks[-1]["t"] += waited
        self.marks[-1]["wall"] += waited

    def _find_models(self) -> None:
        """Hook the trained model's forward: the outermost modules holding the most of the clock's parameters
        (a wrapper and what it wraps: the depth count takes the outer call), none inside a compiled module, whose
        calls dynamo has traced (a hook added there would recompile it)."""
        self.models = trained_models(self.optimizer)
        self.anatomy.device = self.device
        for module in self.models:
            if compiled_in_place(module):  # its hooks run inside the compiled call: the same calls go around it
                self._undo.append(patch(module, "_compiled_call_impl", functools.partial(self._around, module)))
                continue
            pre = module.register_forward_pre_hook(self._forward, with_kwargs=True)
            post = module.register_forward_hook(self._forwarded, always_call=True)
            self._undo += [pre.remove, post.remove]
        # the precision is read again inside the forward, once: Accelerate (an HF Trainer's bf16 on a CPU) opens its
        # autocast inside the model's patched `forward`, after the model's own pre-hooks ran
        plain = [model for model in self.models[:1] if not compiled_in_place(model)]
        leaves = (m for model in plain for m in model.modules() if next(m.children(), None) is None)
        leaf = next(leaves, None)
        if leaf is not None:
            self._inside = leaf.register_forward_pre_hook(self._forward_inside)
            self._undo.append(self._inside.remove)

    def _around(self, module: torch.nn.Module, compiled: Callable, *args: Any, **kwargs: Any) -> Any:
        """The compiled call of a module compiled in place (`model.compile()`), the forward hooks' calls around it."""
        self._forward(module, args, kwargs)
        try:
            return compiled(*args, **kwargs)
        finally:
            self._forwarded(module, args, None)

    def _forward_inside(self, module, args) -> None:
        if torch.is_grad_enabled() and module.training:
            self.precision = forward_precision(self.models[0], self.device)
            self._inside.remove()

    # --- records -------------------------------------------------------------------------------------------------

    def _write_given(self) -> None:
        if _is_main():
            write_atomic(self.path, strict_json(trial_record.given(self)))

    def _write_record(self) -> None:
        self.done = True
        self._write(trial_record.trial(self))

    def _write(self, record: dict[str, Any]) -> None:
        from ...bench.records import Trial  # validated as the runner reads it; NaN stays NaN (a diverged loss)

        if _is_main():
            write_atomic(self.path, Trial.model_validate(record).to_json())

    def _crashed(self, kind, value, tb) -> None:
        self.failure = "".join(traceback.format_exception(kind, value, tb))
        self._excepthook(kind, value, tb)

    def _ended(self) -> None:
        """At exit before the record: the script crashed (its traceback), ran out of steps first, or never stepped;
        or, with no step count asked for (its own run), this is the record."""
        if not self.marks and (os.path.exists(self.path) or (self.failure is None and not trial_variables.is_root())):
            # another process of the trial wrote the record (a launcher's rank), or this is one the script started
            # that never stepped (inductor's compile workers, shut down at the script's exit): not this one's to end
            return
        if self.profile is not None:
            self.profile.ended_early(len(self.marks))
            return
        if self.done or not self.active or self.probe:
            return
        if self.failure is None and len(self.marks) > self.warmup:
            if not self.steps or len(self.marks) >= self.warmup + self.steps:  # its own run; a window cut short
                self._write_record()
                return
        self._write({"error": self.failure or trial_record.ended_early(self)})


def trained_models(optimizer: torch.optim.Optimizer) -> list[torch.nn.Module]:
    """The modules holding the most of `optimizer`'s parameters, outermost first, without those a compiled module
    runs (an `OptimizedModule`'s original and what it contains, what a module compiled in place contains)."""
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    modules = [m for m in gc.get_objects() if issubclass(type(m), torch.nn.Module)]  # type(): no proxy's __class__
    coverage = {id(m): sum(id(p) in held for p in m.parameters()) for m in modules}
    most = max(coverage.values(), default=0)
    if most == 0:
        return []
    chosen = [m for m in modules if coverage[id(m)] == most]
    compiled_away = set()
    for m in chosen:
        inner = getattr(m, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            compiled_away |= {id(x) for x in inner.modules()}
        if compiled_in_place(m):
            compiled_away |= {id(x) for x in m.modules() if x is not m}
    chosen = [m for m in chosen if id(m) not in compiled_away]
    inner_ids = {id(x) for m in chosen for x in m.modules() if x is not m}
    return sorted(chosen, key=lambda m: id(m) in inner_ids)  # outermost first


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The scalars among logged values, one-element tensors included (read where the script logs them: a
    framework's or TensorBoard's logging reads them too)."""
    out = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy's scalars too
            out[name] = float(value)
    return out


def _loader_facts(iterator: Any) -> dict[str, Any]:
    """What the speed lint asks of a DataLoader, read off its iterator: workers, pinned memory, data in memory."""
    dataset = getattr(iterator, "_dataset", None)
    in_memory = isinstance(dataset, torch.utils.data.TensorDataset) or getattr(dataset, "in_memory", False)
    pinned = getattr(iterator, "_pin_memory", None)
    return {"workers": iterator._num_workers, "pin_memory": pinned, "in_memory": in_memory}


def _device(optimizer: torch.optim.Optimizer) -> torch.device:
    return next((p.device for group in optimizer.param_groups for p in group["params"]), torch.device("cpu"))


def _is_main() -> bool:
    return os.environ.get("RANK", "0") == "0"
