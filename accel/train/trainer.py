"""The training loop. Boring on purpose: speed-ups and callbacks add behaviour through their hooks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

import torch
from torch import nn

from .. import devices
from ..callbacks.base import Callback
from ..config.train_config import TrainConfig
from ..engine.core import Core, Ran
from ..errors import AccelError
from ..measure import lint, load
from ..measure.anatomy import Anatomy
from ..measure.flops import Utilisation
from ..measure.meter import BatchInfo, Meter
from ..runs import sharded_checkpoint, signals
from ..runs.checkpoint import check_same_model, check_same_schedule, model_signature
from ..runs.records import EpochRecord, EvalRecord, FitSummary, StepRecord
from ..speedups import Speedup
from ..strategy import Strategy
from ..strategy.world import World
from ..tasks import Task, as_task
from . import divergence, evaluation, stopping
from .epoch_batches import epoch_batches, no_batch_message
from .fit_summary import fit_summary
from .startup import process_age_s

Transform = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class Trainer:
    """Fits `model` with `optimizer` on `train_loader`, evaluating on `val_loader`.

    `task` says what a step needs from a batch (accel.tasks): a Task, or a function `(model, batch) -> loss`;
    without one, `(inputs, targets)` batches are scored by `loss_fn` (default: cross-entropy), for any output
    and target shapes. Batches may be any nesting of tensors. `train_transform` / `eval_transform` run on the
    device on each (inputs, targets) batch (normalisation, batch augmentation). Speed-ups that cannot run on the
    device are skipped with a logged reason. Every step runs through the trainer's `engine` (accel.engine.core): the
    speed-ups, the strategy (default plain) with the precision the speed-ups give it, accumulation and clipping.
    The trainer keeps epochs, the budget, callbacks, the evaluation schedule, the meter and logging.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        train_loader: Iterable,
        *,
        val_loader: Iterable | None = None,
        loss_fn: Callable | None = None,
        task: Task | Callable | None = None,
        scheduler: Any = None,
        config: TrainConfig | None = None,
        speedups: Iterable[Speedup] = (),
        callbacks: Iterable[Callback] = (),
        device: str | torch.device = "auto",
        train_transform: Transform | None = None,
        eval_transform: Transform | None = None,
        log_every_steps: int = 20,
        strict: bool = False,
        world: World | None = None,
        strategy: Strategy | None = None,
    ):
        self.cfg = config or TrainConfig()
        self.task = as_task(task, loss_fn)
        self.engine = Core(
            list(speedups),
            device=device,
            strategy=strategy,
            world=world,
            grad_accum=self.cfg.grad_accum,
            clip_grad_norm=self.cfg.clip_grad_norm,
            strict=strict,
            counter=lambda batch: (self.task.samples(batch), self.task.tokens(batch)),
        )
        self.engine.attach(model, optimizer, scheduler)
        self.engine.loss = lambda batch: self.task.loss(self.engine.model, batch)
        self.train_loader, self.val_loader = train_loader, val_loader
        self.engine.train_loader, self.engine.task = train_loader, self.task.name  # the conflict rule's facts
        self.callbacks = list(callbacks)
        self.train_transform, self.eval_transform = train_transform, eval_transform
        self.log_every_steps = log_every_steps
        self.world = self.engine.world
        self.lint = lint.SpeedLint(self.cfg.lint_ignore, say=self.world.is_main)
        self.epoch = self.batch_in_epoch = 0  # completed epochs / batches this epoch
        self.should_stop = False
        self.stop_signal: int | None = None  # a signal this process received
        self.interrupted = False  # every process agreed to stop for it
        self.diverged_at: int | None = None  # the optimizer step at which a non-finite loss was seen
        self.last_eval: dict[str, float] = {}
        self._eval_step = -1  # the optimizer step at which last_eval was measured
        self.meter = Meter(self.world)
        self.utilisation = Utilisation()
        self._uncounted_s = 0.0  # time inside the loop that is not training (counting FLOPs)
        self.startup_s: float | None = None  # from the process's start to its first training step
        self.summary: FitSummary | None = None  # the last fit's, typed (fit() returns it as a dict)
        self._fitted = False  # fit() has run on this trainer

    # ---- the loop -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Set up the engine's speed-ups and strategy, once: fit() calls it, and so does loading a checkpoint
        first, so a speed-up's saved state (the EMA weights) is loaded into the objects that will use it."""
        self.engine.setup_speedups()

    # ---- what the engine holds ------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.engine.device

    @property
    def module(self) -> nn.Module:
        """The plain module: weights, checkpoints."""
        return self.engine.module

    @property
    def model(self) -> Any:
        """What forward calls: the module, or what speed-ups made of it (compiled, DDP-wrapped)."""
        return self.engine.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.engine.optimizer

    @property
    def scheduler(self) -> Any:
        return self.engine.scheduler

    @property
    def strategy(self) -> Strategy:
        return self.engine.strategy

    @property
    def speedups(self) -> list[Speedup]:
        return self.engine.speedups

    @property
    def skipped_speedups(self) -> dict[str, str]:
        return self.engine.skipped_speedups

    @property
    def anatomy(self) -> Anatomy:
        return self.engine.anatomy

    @property
    def step(self) -> int:
        """Optimizer steps taken."""
        return self.engine.steps

    @step.setter
    def step(self, value: int) -> None:
        self.engine.steps = value

    def fit(self) -> dict[str, Any]:
        """Train until the epoch or step budget is spent, a callback stops it, or a signal interrupts it; return
        summary.json's fields (typed: `trainer.summary`)."""
        if self._fitted:  # a trainer given a finished state (as a resume does) evaluates and reports it, as before
            stopping.check_left(self)
        start, status = time.perf_counter(), "failed"
        self.setup()
        self.lint.start(self.engine)
        machine = load.Window()  # others' load over the fit: a busy machine's figures are not this machine's own
        machine.begin()
        self._emit("on_fit_start")
        saves = any(getattr(c, "saves_checkpoints", False) for c in self.callbacks)
        with signals.stop_requests(self._request_stop, saves):  # until the final checkpoint and summary are written
            try:
                while not stopping.spent(self):
                    if self._train_epoch():
                        self._end_epoch()
                divergence.check_at_end(self)
                status = (
                    signals.stop_status(self.stop_signal)
                    if self.interrupted
                    else "diverged"
                    if self.diverged_at is not None
                    else "completed"
                )
                if status == "completed" and self._eval_step != self.step and not self._run_eval():
                    self.interrupted, status = True, signals.stop_status(self.stop_signal)  # in the final pass
                if status == "completed" and not math.isfinite(self.last_eval.get("val_loss") or 0.0):
                    status, self.diverged_at = "diverged", self.step  # finite weights whose outputs overflow
            finally:
                signals.finishing()
                self.summary = fit_summary(self, status, time.perf_counter() - start, machine.end())
                self._fitted = True
                self._emit("on_fit_end", self.summary)
                self.engine.teardown()
        return self.summary.model_dump(exclude_unset=True)

    def _train_epoch(self) -> bool:
        """Train until the epoch ends (True) or the budget or a signal stops it mid-epoch (False)."""
        self.model.train()
        iterator, batches = epoch_batches(self.train_loader, self.epoch, self.batch_in_epoch)
        self._emit("on_epoch_start", batches)
        self.meter.start_window(self.device)
        tick, yielded = time.perf_counter(), False
        for batch in self.anatomy.batches(iterator):
            fetched, yielded = time.perf_counter(), True
            if self.startup_s is None:  # everything before the first step's batch was in hand is start-up
                self.startup_s = process_age_s()
            ran = self._train_batch(batch, batches)
            stepped = ran.stepped
            if self.cfg.sync_every_step:
                devices.synchronize(self.device)
            done = time.perf_counter() - self._uncounted_s
            self._uncounted_s = 0.0
            with self.anatomy.phase("logging"):
                self._account(BatchInfo(ran.loss, ran.samples, fetched - tick, done - fetched, stepped, ran.tokens))
            if stepped and self.cfg.eval_every_steps and self.step % self.cfg.eval_every_steps == 0:
                if self._run_eval():  # between batches: its time is neither data wait nor training
                    self._log(EvalRecord(epoch=self.epoch, step=self.step, metrics=self.last_eval))
            tick = time.perf_counter()
            if stepped and stopping.spent(self):
                break
        else:
            batches = self.batch_in_epoch
            if not yielded and not self.batch_in_epoch:
                raise AccelError(no_batch_message(self.epoch, self.step))
        if self.batch_in_epoch < (batches or 0):
            return False
        self.batch_in_epoch = 0
        self.epoch += 1
        return True

    def _train_batch(self, batch: Any, batches: int | None) -> Ran:
        """One micro-batch through the core's step (the epoch's last ends an optimizer step, whatever the
        accumulation)."""
        self.batch_in_epoch += 1
        with self.anatomy.phase("to_device"):
            batch = self.on_device(batch, self.train_transform)
        if not self.utilisation.counted:
            self._uncounted_s = self.utilisation.count(self.engine, self.task, batch)
        with self.lint.watch(batch):
            return self.engine.run_step(batch, last=self.batch_in_epoch == batches)

    def on_device(self, batch: Any, transform: Transform | None) -> Any:
        return self.engine.on_device(batch, transform)

    def step_contexts(self) -> ExitStack:
        return self.engine.step_contexts()

    # ---- evaluation -----------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        """The task's metrics over the validation set (accel.train.evaluation)."""
        return evaluation.evaluate(self)

    def _run_eval(self) -> bool:
        """Evaluate now, unless a signal cuts the pass short (one process: it stops at the next batch instead of
        finishing the set): then False, and the last metrics stay those of the last whole pass."""
        with self.anatomy.phase("eval"):
            metrics = evaluation.evaluate(self, stop=None if self.world.distributed else self._stop_asked)
        if metrics is None:
            return False
        self.last_eval, self._eval_step = metrics, self.step
        return True

    def _stop_asked(self) -> bool:
        return self.stop_signal is not None

    # ---- bookkeeping ----------------------------------------------------------------------------------
    def _account(self, info: BatchInfo) -> None:
        self.meter.add(info)
        self._emit("on_batch_end", info)
        if info.optimizer_stepped and self.step % self.log_every_steps == 0:
            self._log(StepRecord(**self._window_stats()))

    def _window_stats(self) -> dict[str, Any]:
        stats = self.meter.window_stats()
        return {
            "epoch": self.epoch + (self.batch_in_epoch > 0),
            "step": self.step,
            "lr": self.optimizer.param_groups[0]["lr"],
            **stats,
            **self.utilisation.stats(stats["samples_per_s"]),
        }

    def _end_epoch(self) -> None:
        stats = self._window_stats()
        stats["train_loss"] = stats.pop("loss")
        if not math.isfinite(stats["train_loss"]):  # no evaluation, and no checkpoint of non-finite weights
            self._log(EpochRecord(**stats))
            return
        every = self.cfg.eval_every_epochs
        if every and self.epoch % every == 0:
            self._run_eval()
        for part in self.engine.parts():
            part.end_epoch()
        evaluated = self.last_eval if self._eval_step == self.step else {}
        record = EpochRecord(**stats, metrics=evaluated, parts=self.engine.part_metrics())
        self._log(record)
        self._emit("on_epoch_end", record)

    def _log(self, record: StepRecord | EvalRecord | EpochRecord) -> None:
        divergence.notice(self, record)
        self._emit("on_log", record)

    def _emit(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    # ---- checkpoints and signals -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The whole training state, on the CPU. With a sharded model this is collective: every rank calls
        it, and only rank 0's result holds the weights and optimizer state."""
        model, optim = self.strategy.full_state_dicts(self.module, self.optimizer)
        return {"model": model, "optimizer": optim, **self.training_state()}

    def training_state(self) -> dict[str, Any]:
        """Everything but the weights and optimizer state (a sharded checkpoint writes those shard by shard)."""
        own = self.engine.own_state()  # the run directory's format names the steps `step`
        return {
            "model_signature": model_signature(self.module),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "speedups": own["speedups"],
            "callbacks": {_state_name(c): c.state_dict() for c in self.callbacks},
            "rng": own["rng"],
            "epoch": self.epoch,
            "step": own["steps"],
            "batch_in_epoch": self.batch_in_epoch,
            "meter": self.meter.state_dict(mid_epoch=self.batch_in_epoch > 0),
        }

    def load_state_dict(self, state: dict[str, Any], source: Any = "checkpoint") -> None:
        check_same_model(state["model_signature"], self.module, source)
        load = sharded_checkpoint.set_state if state.get("sharded") else self.strategy.load_full_state_dicts
        load(self.module, self.optimizer, state["model"], state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            check_same_schedule(state["scheduler"], self.scheduler.state_dict(), source)
            self.scheduler.load_state_dict(state["scheduler"])
        # None: an older checkpoint without the random state (checkpoint.LATER_STATE)
        self.engine.load_own_state({"speedups": state["speedups"], "rng": state["rng"], "steps": state["step"]})
        for callback in self.callbacks:
            callback.load_state_dict(state["callbacks"].get(_state_name(callback), {}))
        self.epoch, self.batch_in_epoch = state["epoch"], state["batch_in_epoch"]
        self.engine.count.micro_batches = self.batch_in_epoch % self.cfg.grad_accum  # into the step it was in
        self.meter.load_state_dict(state.get("meter", {}))

    def _request_stop(self, signum: int) -> None:
        self.stop_signal = signum


def _state_name(callback: Callback) -> str:
    return callback.state_name or type(callback).__name__


def steps_per_epoch(batches: int, grad_accum: int) -> int:
    return math.ceil(batches / grad_accum)
