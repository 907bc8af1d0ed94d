"""What the bench says and does while a script's probe runs (accel.bench.script.probe), from the notes its processes
leave (accel/trial/instrument/guard.py: whether they imported torch, whether accel's recorder started, the optimizer
steps accel's hooks saw): a line at least every PROGRESS_S seconds saying what it waits for; a stop once a step was
seen and the probe, which ends at its first step, did not end within as long again as the step took to come (at
least GRACE_S); and, for a script that ended without a record, what accel saw and failed to see."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROGRESS_S = 20.0
GRACE_S = 30.0
NEVER_STEPPED = (
    "`{command}` ran to its end without stepping an optimizer (no torch.optim optimizer's step() ran, and no "
    "accel.Engine was created), so there is nothing to measure: accel bench, tune and profile time a script by its "
    "optimizer steps. Give it the arguments that make it train, or give them a recipe."
)
NO_TORCH = (
    "`{command}` ran to its end without stepping an optimizer: it never imported torch, so there is nothing to "
    "measure: accel bench, tune and profile time a PyTorch script by its optimizer steps."
)
NO_INSTRUMENT = (
    "`{command}` ran to its end, and accel's instrument did not load in it (no process of it ran accel's "
    "sitecustomize: `python -I` or `-E`, or a launcher that clears PYTHONPATH, leaves it out), so accel cannot tell "
    "whether it trained. Its own log shows whether it stepped (last output below)."
)
NO_RECORDER = (
    "`{command}` ran to its end, and accel's step recorder did not start in it although it imported torch (an "
    "`accel: the instrument could not start` in its output says why, where accel's start failed), so accel could "
    "not see its optimizer steps{seen}. This is accel's failure, not the script's: its own log shows its steps "
    "(last output below)."
)


class ProbeWatch:
    """The probe whose record is `record`, watched from its start: call it about every second with the seconds so
    far; True stops it, `stopped` then says why."""

    def __init__(self, record: Path, limit: float):
        self.record, self.limit = record, limit
        self.said = 0.0  # when the last progress line was printed
        self.step_seen_s: float | None = None
        self.stopped: str | None = None

    def __call__(self, elapsed: float) -> bool:
        notes = self.notes()
        steps, by = _steps(notes)
        if steps and self.step_seen_s is None:
            self.step_seen_s = elapsed
        if elapsed - self.said >= PROGRESS_S:
            self.said = elapsed
            print(f"probe: {elapsed:.0f} s, {self._progress(notes, steps, by)}", file=sys.stderr, flush=True)
        if self.step_seen_s is not None and elapsed > self.step_seen_s + max(GRACE_S, self.step_seen_s):
            self.stopped = (
                f"{by} saw {steps} optimizer step(s), the first {elapsed - self.step_seen_s:.0f} s ago, and the probe, "
                "which ends at the first step, did not end: accel stopped it there (accel's failure, not the script's)"
            )
            return True
        return False

    def notes(self) -> list[dict[str, Any]]:
        """Each process's last note (one being replaced is read at the next call)."""
        found = []
        for path in self.record.parent.glob(f"{self.record.name}.*.note"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def _progress(self, notes: list[dict[str, Any]], steps: int, by: str) -> str:
        if steps:
            return f"{by} saw {steps} optimizer step(s); waiting for the probe to end"
        said = "no optimizer step seen yet"
        if _unrecorded(notes):
            said += (
                "; accel's step recorder did not start (torch is imported): the probe ends at the first step "
                f"another of accel's hooks sees, or at {self.limit:g} s"
            )
        return said

    def why_stopped(self, command: str, hint: str) -> str:
        """Why the probe was stopped before it was done: by this watch, or at the time limit."""
        if self.stopped:
            return f"`{command}`: {self.stopped}"
        if _unrecorded(self.notes()):
            return (
                f"`{command}` was stopped at the {self.limit:g} s limit{hint}: accel's step recorder did not start in "
                "it although it imported torch, so accel could not see whether it stepped an optimizer. This is "
                "accel's failure, not the script's: its own log shows its steps"
            )
        return (
            f"`{command}` did not step an optimizer (nor create an accel.Engine) within {self.limit:g} s{hint}, so it "
            "was stopped"
        )

    def ended_without_record(self, command: str) -> str:
        """Why a probe that ended by itself (exit 0) left no record: what accel saw, never blaming the script for
        what accel failed to see."""
        notes = self.notes()
        if not notes:
            return NO_INSTRUMENT.format(command=command)
        if not any(n["torch"] for n in notes):
            return NO_TORCH.format(command=command)
        if _unrecorded(notes):
            steps, by = _steps(notes)
            return NO_RECORDER.format(command=command, seen=f" ({by} saw {steps})" if steps else "")
        return NEVER_STEPPED.format(command=command)


def _unrecorded(notes: list[dict[str, Any]]) -> bool:
    """Whether a process imported torch without accel's recorder starting in it."""
    return any(n["torch"] and not n["recorder"] for n in notes)


def _steps(notes: list[dict[str, Any]]) -> tuple[int, str]:
    """The most optimizer steps any hook of any process saw, and which hook."""
    counts = [(n, by) for note in notes for by, n in note["steps"].items()]
    return max(counts, default=(0, ""))
