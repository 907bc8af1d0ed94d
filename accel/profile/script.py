"""`accel profile -- python train.py ARGS`: the profile window inside a user's own script, the parent's side.

The command runs the script with `ACCEL_PROFILE` set to the window's settings (`Window`, JSON: the output folder,
warm-up and profiled steps, rows, the commands for the report), in a room that keeps the user's files. Inside it
(accel/trial: the script's engine, accel/trial/engine_profile.py, or the instrument without one) the same
ProfileWindow a recipe's trainer drives opens, and after warm-up + steps writes the report (profile.json/.md/.html,
the trace) and ends the process (exit 0).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.trial_variables import PROFILE as VARIABLE
from .steps import profile_window

if TYPE_CHECKING:
    from .window import ProfileWindow


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


def profile_script(window: Window, accel_set: str) -> dict[str, Any]:
    """Run the script with the window in ACCEL_PROFILE (and `accel_set` as ACCEL_SET), its output the terminal's;
    the report it wrote. A script that ends before its window does fails here, saying so."""
    from ..bench.isolation import Room
    from ..bench.trial_process import exit_reason, instrumented_pythonpath
    from ..engine.settings import SET_VARIABLE
    from ..errors import AccelError

    # the trial's side profiles the script in its process (accel/trial): through its engine, or the instrument
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
