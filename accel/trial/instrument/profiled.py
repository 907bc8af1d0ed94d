"""`accel profile -- python train.py` of a script without an accel.Engine: the recorder's step clock drives the same
ProfileWindow a recipe's trainer and a script's engine drive (accel/profile/window.py).

The phases are what the recorder sees from outside: the DataLoader's batches (`data`), the trained model's forward
(`forward`), `loss.backward()` (`backward`) and every optimizer's step (`optimizer`); the rest of the loop, its loss
computation included, is `other`. The window opens at the first optimizer step, where the model is found.
"""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from ...profile.script import Window

if TYPE_CHECKING:
    from .recorder import Recorder

log = logging.getLogger("accel")


def requested() -> UnchangedProfile | None:
    """The profile `accel profile` asked for (rank 0 only), or None."""
    window = Window.from_env()
    if window is None or os.environ.get("RANK", "0") != "0":
        return None
    return UnchangedProfile(window)


class UnchangedProfile:
    """The window over the recorder's clock: opened at its first step, fed every step after, reported when it
    closes (the recorder then ends the process as a trial's does)."""

    def __init__(self, window: Window):
        self.settings = window
        self.window = window.profile_window()
        self.run: UnchangedRun | None = None
        self.done = False

    def stepped(self, rec: Recorder) -> bool:
        """The clock stepped; whether the window is done (its report written)."""
        if self.run is None:
            self.run = UnchangedRun(rec)
            self.window.start(self.run)
        else:
            self.window.stepped(self.run)
        if self.window.closed:
            self.window.end(self.run, "completed")
            self.done = True
        return self.done

    def ended_early(self, steps: int) -> None:
        """The script ended (or crashed) before the window closed: no report (the time from its last step to its
        end is not a step); the profiler is stopped all the same, since one left running ends the process with
        SIGSEGV at exit."""
        profiled = self.window.profiled
        if self.done or profiled is None:
            return
        if self.run is not None and self.run.anatomy.active:
            self.run.anatomy.stop()
        profiled.profiler.stop()
        asked = self.settings.warmup + self.settings.steps
        log.warning("profile: the script ended after %d of the %d optimizer steps asked for", steps, asked)


class UnchangedRun:
    """What ProfileWindow reads of a run (accel.profile.window.ProfiledRun), from the recorder of a script without an
    engine."""

    task = None  # a loop of the script's own
    speedups = ()

    def __init__(self, rec: Recorder):
        self.rec, self.anatomy = rec, rec.anatomy

    @property
    def device(self) -> torch.device:
        return self.rec.device

    @property
    def steps(self) -> int:
        return len(self.rec.marks)

    @property
    def model(self) -> torch.nn.Module | None:
        return self.rec.models[0] if self.rec.models else None

    module = model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.rec.optimizer

    @property
    def train_loader(self) -> Any:
        return SimpleNamespace(num_workers=self.rec.loader_workers)

    @property
    def strategy(self) -> Any:
        # no model hooked (its optimizer's tensors in no module): its forward's precision was never seen
        seen = self.rec.precision or ("fp32" if self.rec.models else "unknown")
        return SimpleNamespace(precision=SimpleNamespace(name=seen))

    @property
    def framework(self) -> str:
        from .recorder import FACTS

        return FACTS["framework"]

    @property
    def parsers(self) -> list[dict[str, Any]]:
        """The script's argparse parsers as the instrument recorded them: a plain script's own switches."""
        from .parsers import captured

        return captured()
