"""A bench trial inside a user's own script: `accel bench -- python train.py` runs the script with the trial's
variables (what they ask: accel/trial/requested.py), and the script's engine, observed by this agent, measures its
own optimizer steps, writes a `Trial` record and ends the process (exit 0); or, asked for a probe, says what the
engine was given and exits at `eng.setup`.

Unless the bench asks for `--sync window`, the device is synchronised after every step, so a step's time is its
real time: from the end of the previous optimizer step to the end of this one, the loop's own work (data, logging)
included, as its user waits for it. A script that ends (or crashes) before its steps are done leaves a record
saying so.

A process is one trial (or one profile), whatever the number of its engines: a GAN's two engines join the trial the
first one made (`Engines`), and the first to step is its clock, as the instrument's first optimizer to step is
(accel.trial.instrument.recorder). A trial writes none of the script's own records (`out=`): that folder is its real
run's (accel.engine.own_loop).

Each engine's core tells its observer (`Joined`) of its events; the observer hands them to the process's agent
(the trial, the probe or the profile: accel/trial/dispatch.py chooses) with the engine's records
(accel.engine.loop_records: its core, its loop's state, its summary).
"""

from __future__ import annotations

import atexit
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

import psutil
import torch

from .. import devices
from ..bench.pruner import Deadline, Pruned
from ..bench.trial_figures import TimedWindow
from ..engine.core import Observer
from ..io import strict_json, write_atomic
from ..measure import load
from ..speedups.compile_workers import stop_compile_workers
from .instrument import guard
from .instrument.parsers import made

if TYPE_CHECKING:
    from ..bench.target import Target
    from ..engine.loop_records import LoopRecords
    from ..engine.settings import Settings


class Agent:
    """The process's trial, probe or profile, told of every engine's events with that engine's records (`engine`);
    every hook does nothing unless overridden."""

    done = False

    def join(self, engine: LoopRecords) -> None:
        """Another engine of the script."""

    def set_up(self, engine: LoopRecords) -> None:
        """`eng.setup` has run."""

    def loss(self, engine: LoopRecords, loss: torch.Tensor, share: int) -> None:
        """A micro-batch's loss."""

    def stepped(self, engine: LoopRecords) -> None:
        """An optimizer step of `engine` ended."""

    def logged(self, record: dict[str, Any]) -> None:
        """The loop logged metrics (`eng.log`)."""


class Joined(Observer):
    """One engine's observer: its core's events, handed to the process's agent with the engine's records."""

    def __init__(self, agent: Agent, engine: LoopRecords):
        self.agent, self.engine = agent, engine

    def set_up(self) -> None:
        self.agent.set_up(self.engine)

    def loss(self, loss: torch.Tensor, share: int) -> None:
        self.agent.loss(self.engine, loss, share)

    def stepped(self) -> None:
        self.agent.stepped(self.engine)

    def logged(self, record: dict[str, Any]) -> None:
        self.agent.logged(record)


class Engines:
    """The engines of one script (a GAN's: one per model and optimizer), measured as one training. The first to
    step is the clock: its optimizer steps are the script's steps, its model's forwards its samples; the others'
    steps fall inside them."""

    def __init__(self, engine: LoopRecords):
        self.all, self.clock = [engine], None

    def join(self, engine: LoopRecords) -> None:
        self.all.append(engine)

    def ticks(self, engine: LoopRecords) -> bool:
        """Whether this optimizer step of `engine` is a step of the script's: the clock's."""
        if self.clock is None:
            self.clock = engine
        return engine is self.clock

    @property
    def main(self) -> LoopRecords:
        """The clock, or before any step the first engine."""
        return self.clock or self.all[0]


class Probe(Agent):
    """What the engine was given, written as it is created (a script that fails before `eng.setup` still says
    it), then again with the model's traits, the run's facts (accel.speedups.RunFacts) and the libraries its trials'
    zygote may import at `eng.setup`, where the process ends."""

    # it ends the process at the first `eng.setup`: a later engine has nothing to add (`join` does nothing)

    def __init__(self, engine: LoopRecords, settings: Settings, path: str):
        self.core, self.path = engine.core, path
        self.given = {
            "speedups": {name: config.model_dump(mode="json") for name, config in settings.speedups.items()},
            "device": settings.device,
            "resolved_device": str(self.core.device),
            "strategy": settings.strategy,
            "optimizer": settings.optimizer,
            "skipped_speedups": self.core.skipped_speedups,
        }
        self._write()

    def set_up(self, engine: LoopRecords) -> None:
        from ..models.blocks import model_traits
        from . import preload

        self.given["model_traits"] = model_traits(engine.core.module)
        self.given["run"] = engine.core.run_facts().to_data()  # what tune's conflict rule judges candidates by
        self.given["preload"] = preload.preloadable()  # what its trials' zygote imports (accel/bench/zygotes.py)
        self._write()
        guard.end()

    def _write(self) -> None:
        if self.core.world.is_main:
            write_atomic(self.path, strict_json(self.given))


class ScriptTrial(Agent):
    """Counts the engine's optimizer steps and times each; after warm-up + steps (or at the target, or when the
    script ends: see the module docstring), writes the record and exits."""

    def __init__(self, engine: LoopRecords, path: str, warmup: int, steps: int, window: float = 0.0):
        self.engines, self.path, self.warmup, self.steps, self.window = Engines(engine), path, warmup, steps, window
        self.timed = TimedWindow(steps, window)
        self.created = time.perf_counter()
        self.marks: list[dict[str, Any]] = []  # at the end of each optimizer step: time and the engine's counts
        self.losses: dict[int, list[torch.Tensor]] = {}  # this step's, by engine id, as the loop gave them (no sync)
        self.step_losses: list[torch.Tensor | None] = []  # None: the loop's backward bypassed the engine
        self.done = False
        self.failure: str | None = None
        self.every_step = True  # synchronise after every step (False: after the warm-up's and the last only)
        self.target: Target | None = None
        self.metric: str | None = None  # the logged metric whose values are recorded (the target's)
        self.stop = False  # end the trial when the target is reached
        self.deadline: Deadline | None = None  # with `stop`: end it short of the target (tune's pruner)
        self.pruned: Pruned | None = None
        self.evals: list[dict[str, Any]] = []  # each logged value of the metric, as TargetClock's
        self.logged_names: set[str] = set()  # every metric the loop logged, for a target it never logs
        self.model_traits: dict[int, dict[str, bool]] = {}  # by engine id
        self.load = load.Window()  # the machine's load over the timed steps
        self.process_started = psutil.Process().create_time()
        self.created_wall = time.time()
        self.eval_s, self.last_step = 0.0, time.time()
        devices.reset_peak_memory(engine.core.device)
        self._excepthook = sys.excepthook
        sys.excepthook = self._crashed
        atexit.register(self._ended_early)

    @property
    def engine(self) -> LoopRecords:
        """The engine whose steps and counts the record holds: the clock (`Engines`)."""
        return self.engines.main

    def join(self, engine: LoopRecords) -> None:
        self.engines.join(engine)

    def set_up(self, engine: LoopRecords) -> None:
        """`eng.setup` has run: the model's traits go into the record, as a recipe trial's do."""
        from ..models.blocks import model_traits

        self.model_traits[id(engine)] = model_traits(engine.core.module)
        if not self.warmup and not self.marks:  # the timed steps begin at the last eng.setup before the first
            self.load.begin()

    def loss(self, engine: LoopRecords, loss: torch.Tensor, share: int) -> None:
        """A micro-batch's loss: the loop's backward gets its share of the step already (it divides by its
        micro-batches itself); a compiled step's is whole (`share`: the engine divides it)."""
        self.losses.setdefault(id(engine), []).append(loss.detach().float() / share)

    def logged(self, record: dict[str, Any]) -> None:
        """What the loop logged (`eng.log`): the metric, timed from the process start less the time the script's
        evaluations took (each from the step before it to its log)."""
        self.logged_names |= set(record) - {"step"}  # the engine's own count, not a metric the loop logged
        if self.metric is None or self.metric not in record:
            return
        now = time.time()
        self.eval_s += now - self.last_step
        self.last_step = now
        value = float(record[self.metric])
        wall_s = now - self.process_started - self.eval_s
        self.evals.append({"step": len(self.marks), "wall_s": wall_s, "value": value, "eval_s": self.eval_s})
        if self.stop and self.target.reached(value):
            self._finish()
        elif self.deadline is not None:
            self._prune(self.deadline.at_eval(self.target, self.evals, len(self.marks)))

    def _prune(self, stop: Pruned | None) -> None:
        """Ended short of the target, as at the target: the record says why."""
        if stop is not None:
            self.pruned = stop
            self._finish()

    def stepped(self, engine: LoopRecords) -> None:
        """The end of an optimizer step of `engine` (it counted it): a step of the script's if it is the clock."""
        if not self.engines.ticks(engine):
            return
        done = len(self.marks) + 1
        if self.every_step or done <= self.warmup:
            devices.synchronize(engine.core.device)
        if done == self.warmup:
            stop_compile_workers()  # a compile-worker pool's start is warm-up, not timed (the loop's own compile too)
            self.load.begin()  # before the mark: its own cost stays out of the timed steps
        self.last_step = time.time()
        count, data_s = engine.core.count, sum(e.core.count.data_s for e in self.engines.all)  # any loader's: a wait
        self.marks.append(
            {"t": time.perf_counter(), "samples": count.samples, "tokens": count.tokens, "data_s": data_s}
        )
        losses = self.losses.get(id(engine))
        self.step_losses.append(torch.stack(losses).sum() if losses else None)
        self.losses = {}
        if self.steps and done > self.warmup and self.timed.add(self._last_step_s()):
            if not self.every_step:  # the window's end holds the work its steps left queued
                devices.synchronize(engine.core.device)
                self.marks[-1]["t"] = time.perf_counter()
            self._finish()
        elif self.deadline is not None:
            now_s = self.last_step - self.process_started - self.eval_s
            self._prune(self.deadline.at_step(self.target, now_s, done))

    def _last_step_s(self) -> float:
        """The last optimizer step's seconds (the first's from the last eng.setup before it, as the record's)."""
        before = self.marks[-2]["t"] if len(self.marks) > 1 else self._setup_end()
        return self.marks[-1]["t"] - before

    def _setup_end(self) -> float:
        """The last eng.setup before the first step: every speed-up was set up there."""
        first = self.marks[0]["t"]
        return max(e.loop.started for e in self.engines.all if e.loop.started <= first)

    def _finish(self) -> None:
        """Write the whole record and end the process (exit 0)."""
        self._write_record()
        guard.end()

    def _write_record(self) -> None:
        from ..bench.trial_figures import diverged

        record = self.record() | self._losses()
        self._write(record | self._target_figures() | diverged(record.get("step_losses", [])))
        self.done = True

    def record(self) -> dict[str, Any]:
        """The figures of `accel.bench.records.Trial`, from the engine's own counts."""
        from ..bench.trial_figures import deltas, rates, steady, window_short
        from ..speedups import compile_figures

        window = self.load.end()  # first: what follows (the FLOPs counted) is not the timed steps
        engine = self.engine
        setup_end = self._setup_end()
        steps = deltas(self.marks, {"t": setup_end})
        cut, timed, said = steady(steps[self.warmup :])
        setup_s = setup_end - self.created
        core = engine.core
        figures = rates(timed, data_known=core.train_loader is not None)
        summary = engine.summary()
        flops = engine.loop.utilisation.flops_per_sample
        return {
            **figures,
            **engine.loop.utilisation.stats(figures["samples_per_s"]),  # FLOP/s and MFU over the timed steps
            "mfu_of": engine.loop.utilisation.peak_dtype,
            "flops_per_step": flops * steps[0]["samples"] if flops else None,
            "build_s": self.created_wall - self.process_started,  # start-up: the process's start to this engine
            "setup_s": setup_s,
            "first_step_s": setup_s + steps[0]["s"],
            "warmup_s": setup_s + sum(s["s"] for s in steps[: self.warmup] + cut),
            **said,
            **window_short([s["s"] for s in steps[self.warmup :]], self.window),
            "peak_memory_mb": devices.peak_memory_mb(core.device),
            "batch_size": steps[0]["samples"] // core.grad_accum or None,  # per micro-batch, as a recipe's
            "grad_accum": core.grad_accum,
            "wall_s": time.perf_counter() - self.created,
            "skipped_speedups": core.skipped_speedups,
            "lint": summary.lint,
            "model_traits": self.model_traits.get(id(engine)),
            **compile_figures(summary.speedup_metrics),
            "env": devices.environment(core.device),
            "load": window,
            **made(),  # under the script's own output options
        }

    def _losses(self) -> dict[str, Any]:
        """Each step's loss and the final loss; none when a step's loss did not pass through `eng.backward`."""
        if not self.step_losses or any(loss is None for loss in self.step_losses):
            return {}
        from ..bench.trial_figures import final_loss

        losses = torch.stack(self.step_losses).tolist()  # one device sync, at the end
        planned = losses[self.warmup : self.warmup + self.steps or None]  # as every variant trained them
        return {"final_loss": final_loss(planned), "step_losses": losses}

    def _target_figures(self) -> dict[str, Any]:
        from ..bench.trial_figures import target_figures

        if self.metric is None:
            return {}
        fix = f"log it after an evaluation, `eng.log({{'{self.metric}': value}})`, or give the trials more --steps"
        steps, names = len(self.marks), self.logged_names
        return target_figures(self.target, self.metric, self.evals, steps, "through eng.log ", fix, names, self.pruned)

    def _write(self, record: dict[str, Any]) -> None:
        from ..bench.records import Trial  # validated as the runner reads it; NaN stays NaN (a diverged loss)

        if self.engine.core.world.is_main:
            write_atomic(self.path, Trial.model_validate(record).to_json())

    def _crashed(self, kind, value, tb) -> None:
        self.failure = "".join(traceback.format_exception(kind, value, tb))
        self._excepthook(kind, value, tb)

    def _ended_early(self) -> None:
        """At exit before the record: the script crashed (its traceback) or ran out of steps first; or, with no
        step count asked for, its run ended and this is the record."""
        if self.done:
            return
        if self.failure is None and (not self.steps or len(self.marks) >= self.warmup + self.steps):
            self._write_record()  # its own run, or a window by time that the script's end cut short
            return
        from ..bench.trial_figures import ran_out

        self._write({"error": self.failure or ran_out(len(self.marks), self.warmup, self.steps)})
