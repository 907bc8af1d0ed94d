"""The profile window inside a user's own script with an engine (`accel profile -- python train.py`, whose
settings `accel profile` passes in ACCEL_PROFILE: accel/profile/script.py's `Window`). The script's engine drives
the same ProfileWindow a recipe's trainer does: it opens after `eng.setup`, marks the end of every optimizer step,
and after warm-up + steps writes the report (profile.json/.md/.html, the trace) and ends the process (exit 0).

What the engine sees of the step is timed by phase (accel/measure/anatomy.py): batches from `eng.setup_dataloaders`
(`data`, `to_device`), the model's forward, `eng.autocast()` (`loss`), `eng.backward`, `optimizer.step()`, the
speed-ups' hooks; the rest of the loop (its own batches, a loss outside `eng.autocast()`) is `other`.
"""

from __future__ import annotations

import atexit
import logging
from typing import TYPE_CHECKING

from ..profile.script import Window
from .engine_agent import Agent, Engines

if TYPE_CHECKING:
    from ..engine.core import Core
    from ..engine.loop_records import LoopRecords

log = logging.getLogger("accel")


def attach(engine: LoopRecords) -> ScriptProfile | None:
    """The profile `accel profile` asked for (rank 0 only), or None."""
    window = Window.from_env()
    if window is None or not engine.core.world.is_main:
        return None
    return ScriptProfile(engine, window)


class ScriptProfile(Agent):
    """The engines' side of `accel profile`: one window per process over the clock's optimizer steps (whatever the
    number of engines: they share one anatomy, so every engine's phases are timed), then the report and exit."""

    def __init__(self, engine: LoopRecords, window: Window):
        self.engines, self.settings = Engines(engine), window
        self.window = window.profile_window()
        self.done = self.started = False
        atexit.register(self._ended_early)

    @property
    def run(self) -> Core:
        """What the window reads: the core of the clock's engine (the first to step)."""
        return self.engines.main.core

    def join(self, engine: LoopRecords) -> None:
        engine.core.anatomy = self.engines.all[0].core.anatomy
        self.engines.join(engine)

    def set_up(self, engine: LoopRecords) -> None:
        """The first `eng.setup` has run: the window starts counting steps (the model is what the speed-ups made
        of it)."""
        if not self.started:
            self.started = True
            self.window.start(self.run)

    def stepped(self, engine: LoopRecords) -> None:
        if not self.engines.ticks(engine):
            return
        self.window.stepped(self.run)
        if self.window.closed:
            self._finish()
            raise SystemExit(0)

    def _finish(self) -> None:
        self.done = True
        self.window.end(self.run, "completed")  # the window closed: its steps all ran

    def _ended_early(self) -> None:
        """The script ended (or crashed) before the window did: no report, since the time from its last step to
        its end is not a step (`accel profile` says what was missing). The profiler is stopped all the same: one
        left running at the interpreter's exit ends it with SIGSEGV."""
        profiled = self.window.profiled
        if not self.done and profiled is not None:
            if self.run.anatomy.active:
                self.run.anatomy.stop()
            profiled.profiler.stop()
        if not self.done:
            log.warning(
                "profile: the script ended after %d of the %d optimizer steps asked for (%d warm-up + %d profiled)",
                self.run.step,
                self.settings.warmup + self.settings.steps,
                self.settings.warmup,
                self.settings.steps,
            )
