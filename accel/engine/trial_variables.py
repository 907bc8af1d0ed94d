"""The variables by which `accel bench` and `accel profile` ask a script's process to be a trial or a profile, and
keep its files (what each asks: accel/trial/requested.py; the room: accel/bench/isolation.py). The one home of
names the parent's side (accel/bench, accel/profile) and the trial's (accel/trial) share: here, below both, since
the engine reads them too (a trial's engine leaves its `out=` alone) and none of them may import the trial."""

from __future__ import annotations

import os

PATH, STEPS, WARMUP, PROBE = "ACCEL_TRIAL", "ACCEL_TRIAL_STEPS", "ACCEL_TRIAL_WARMUP", "ACCEL_TRIAL_PROBE"
TARGET = "ACCEL_TRIAL_TARGET"  # METRIC=VALUE: the time until the script reports it
STOP, CURVE = "ACCEL_TRIAL_STOP", "ACCEL_TRIAL_CURVE"  # end at the target; record this metric's every value
DEADLINE = "ACCEL_TRIAL_DEADLINE"  # seconds: with STOP, end short of the target once it cannot be reached by then
SYNC = "ACCEL_TRIAL_SYNC"  # window: synchronise around the timed steps only
WINDOW = "ACCEL_TRIAL_WINDOW"  # seconds of timed steps a trial takes at least, beside its steps (--window)
PATTERNS = "ACCEL_TRIAL_METRIC_PATTERNS"  # a JSON list of regular expressions: metrics from the printed lines
PROFILE = "ACCEL_PROFILE"  # `accel profile -- SCRIPT`: the profile window's settings (accel.profile.script)
ROOT = "ACCEL_TRIAL_ROOT"  # the process id of the trial's first Python process, set there for its children
# a trial's room without a private view (accel/trial/backups.py): the journal of its backups, JSON lines of
# {"path", "backup"} that the bench replays when it ends; and the bench's own folders, os.pathsep-separated,
# which the trial writes for real
JOURNAL, EXITS = "ACCEL_ROOM_JOURNAL", "ACCEL_ROOM_EXITS"


def claim_root() -> None:
    """Called in every Python process of a trial as it starts: the first one (the command the bench ran) is the
    trial's root, every process it starts inherits its id."""
    os.environ.setdefault(ROOT, str(os.getpid()))


def is_root() -> bool:
    """Whether this process is the command the bench ran, not one it started (torchrun's ranks, inductor's compile
    workers, a spawned DataLoader worker)."""
    return os.environ.get(ROOT) == str(os.getpid())


def asked() -> bool:
    """Whether this process is a bench trial or a profile."""
    return bool(os.environ.get(PROFILE) or os.environ.get(PATH))
