"""`accel profile -- python train.py ARGS`: the profile window inside a user's own script.

The command runs the script with `ACCEL_PROFILE` set to the window's settings (JSON: the output folder, warm-up and
profiled steps, rows, the commands for the report). The script's engine then drives the same ProfileWindow a
recipe's trainer does: it opens after `eng.setup`, marks the end of every optimizer step, and after warm-up +
steps writes the report (profile.json/.md/.html, the trace) and ends the process (exit 0).

What the engine sees of the step is timed by phase (accel/measure/anatomy.py): batches from `eng.setup_dataloaders`
(`data`, `to_device`), the model's forward, `eng.autocast()` (`loss`), `eng.backward`, `optimizer.step()`, the
speed-ups' hooks; the rest of the loop (its own batches, a loss outside `eng.autocast()`) is `other`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bench.engine_trial import Agent, Engines
from ..engine.trial_variables import PROFILE as VARIABLE
from .steps import profile_window

if TYPE_CHECKING:
    from ..engine.core import Core
    from ..engine.loop_records import LoopRecords
    from .window import ProfileWindow

log = logging.getLogger("accel")


@dataclass(frozen=True)
class Window:
    """The settings `accel profile` passes in ACCEL_PROFILE."""

    out: str
    warmup: int
    steps: int
    rows: int
    sync_debug: bool
    command: str  # the accel command, for the report
    script: list[str]  # the script's command line, for the advice's bench commands
    sets: list[str]  # its --set items, for the same

    def to_env(self) -> dict[str, str]:
        return {VARIABLE: json.dumps(vars(self))}

    @classmethod
    def from_env(cls) -> Window | None:
        """The window `accel profile` asked this process for, or None."""
        text = os.environ.get(VARIABLE)
        return cls(**json.loads(text)) if text else None

    def profile_window(self) -> ProfileWindow:
        """The window these settings ask for, its report written into `out` when it closes."""
        return profile_window(
            self.warmup, self.steps, Path(self.out), self.command, self.script, self.rows, self.sync_debug, self.sets
        )


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


def profile_script(window: Window, accel_set: str) -> dict[str, Any]:
    """Run the script with the window in ACCEL_PROFILE (and `accel_set` as ACCEL_SET), its output the terminal's;
    the report it wrote. A script that ends before its window does fails here, saying so."""
    from ..bench.isolation import Room
    from ..bench.trial_process import exit_reason, instrumented_pythonpath
    from ..engine.settings import SET_VARIABLE
    from ..errors import AccelError

    # the instrument profiles a script without an engine (accel/bench/instrument); an engine's script, itself
    env = {**os.environ, SET_VARIABLE: accel_set, "PYTHONPATH": instrumented_pythonpath(), **window.to_env()}
    room = Room(window.script, None, Path(window.out) / "left-behind")
    with room.entered(window.script, env) as (argv, env):
        code = subprocess.run(argv, env=env).returncode
    print(f"profile: your files: {room.kept.said()}", file=sys.stderr, flush=True)
    path = Path(window.out) / "profile.json"
    if not path.is_file():
        raise AccelError(
            f"no profile written: `{shlex.join(window.script)}` {exit_reason(code)} before its "
            f"{window.warmup} + {window.steps} optimizer steps (its output above says why); let it run more steps "
            "through its own arguments, or ask for fewer with --warmup/--steps."
        )
    return json.loads(path.read_text())
