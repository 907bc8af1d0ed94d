"""A probe's or trial's bound, apart from the recorder: the optimizer steps any of accel's hooks saw (torch's global
step hook, the HF Trainer's or Lightning's callback). In a process whose recorder did not start (accel missed torch's
import, or the recorder's start failed) they end it once it has the steps the bench asked for (a probe: one), with a
record that says what accel failed to do rather than blaming the script. A probe's processes also leave a note of
what loaded and what stepped, which the bench reads while it waits (accel/bench/probe_watch.py). Nothing here
imports torch before the script has."""

from __future__ import annotations

import atexit
import json
import os
import shlex
import sys
import time
from typing import Any, NoReturn

from ...engine import trial_variables
from ...engine.trial_variables import PATH, PROBE, STEPS, WARMUP
from ...io import write_atomic

SEEN: dict[str, int] = {}  # the optimizer steps each of accel's hooks saw
TORCH_HOOK = "torch's optimizer-step hook"
UNRECORDED = (
    "accel's step recorder did not start in the script's process, though it imported torch (an `accel: the "
    "instrument could not start` in the output says why, where accel's start failed), so accel cannot time its "
    "steps: {by} saw {steps} optimizer step(s), and accel stopped the script there. The script trains (its own log "
    "shows its steps): this is accel's failure, not the script's."
)
_hooked = False
_noted = 0.0  # when this process last left its note (time.monotonic)
_ended = False  # accel ended this process itself, its record written
_recorder: Any = None  # the process's recorder, once started (`recorder_started`)


def start() -> None:
    """At the process's start: registered first, so run last, the exit that skips the interpreter's teardown; a
    probe's process leaves its note at its exit too (accel/bench/probe_watch.py reads a probe that ended without a
    record by it)."""
    atexit.register(_skip_teardown)
    if _probing():
        atexit.register(note)


def end() -> NoReturn:
    """accel ends the probe or trial here, its record written. The exit handlers of the script and its libraries
    still run; the interpreter's teardown of torch's modules does not (1.6 s a process on a 2-core machine, a
    sixth of a script's trial: benchmarks/process_noise.py's note). The bench ends what the process leaves behind
    (DataLoader workers) with its process group."""
    global _ended
    _ended = True
    started = started_by_script()
    if started:
        print(
            f"accel: ended `{started}` (pid {os.getpid()}), a process the script started, after the optimizer steps "
            "the bench measures in it: its output stops here, and the script sees it exit with 0",
            file=sys.stderr,
            flush=True,
        )
    raise SystemExit(0)


def started_by_script() -> str | None:
    """This process's command line where the script started it (a plain child, not a launcher's rank, which the
    trial measures by design): the trial's steps were measured in it, and the bench says so."""
    if not os.environ.get(trial_variables.ROOT) or trial_variables.is_root() or "LOCAL_RANK" in os.environ:
        return None  # not under the instrument, the command the bench ran, or a launcher's rank
    return shlex.join(sys.orig_argv)


def _skip_teardown() -> None:
    if _ended:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def hook_torch() -> None:
    """torch is imported (seen by the import watch or by a framework's hook): its global step hook tells this of
    every optimizer's step, whether or not the recorder started."""
    global _hooked
    if not _hooked:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: stepped(TORCH_HOOK))
        _hooked = True
    note()


def stepped(by: str) -> None:
    """One optimizer step seen by the hook `by`; with no recorder, the process ends at the bench's count."""
    SEEN[by] = SEEN.get(by, 0) + 1
    steps = max(SEEN.values())
    if steps == 1 or time.monotonic() - _noted >= 1.0:
        note()
    limit = _limit()
    if limit and steps >= limit and not recording():
        if os.environ.get("RANK", "0") == "0":
            write_atomic(os.environ[PATH], json.dumps({"error": UNRECORDED.format(by=by, steps=steps)}))
        end()


def recorder_started(recorder: Any) -> None:
    """The recorder started in this process (accel/trial/instrument/recorder.py, which this module never imports:
    it imports torch)."""
    global _recorder
    _recorder = recorder


def recording() -> bool:
    """Whether the recorder started in this process (it may have stood down for an engine, which then measures)."""
    return _recorder is not None


def stand_down_recorder() -> None:
    """The script created an `accel.Engine`, which measures its own steps: the recorder, if it started, lets go of
    every hook."""
    if _recorder is not None:
        _recorder.stand_down()


def note() -> None:
    """A probe's process says what it loaded and what its hooks saw, in a file beside the probe's record."""
    global _noted
    if not _probing():
        return
    _noted = time.monotonic()
    seen = {"torch": "torch" in sys.modules, "recorder": recording(), "steps": dict(SEEN)}
    write_atomic(f"{os.environ[PATH]}.{os.getpid()}.note", json.dumps(seen))


def _probing() -> bool:
    return os.environ.get(PROBE) == "1" and bool(os.environ.get(PATH))


def _limit() -> int:
    """The optimizer steps the bench asked this process for (warm-up included, as the recorder counts them); 0: no
    bound (not a trial, or the script's own run)."""
    if not os.environ.get(PATH):
        return 0
    if _probing():
        return 1
    steps = int(os.environ.get(STEPS, "1"))
    return steps and max(int(os.environ.get(WARMUP, "0")), 1) + steps
