"""A trial's room: a trial of a script (bench, tune, profile, and the probe) never changes the user's files.

One guarantee, kept by a mechanism rather than by patched calls, and checked whichever mechanism ran:
- **isolated**: where the kernel lets an unprivileged process make user and mount namespaces, the trial runs in a
  private view of the file system (accel/trial/room_enter.py): an overlay over every writable mount, so whatever
  writes (Python or native code, a `cp` the script runs) lands in the trial's upper layer, gone with the trial;
- **restored**: elsewhere (user namespaces disabled: Ubuntu 24.04's AppArmor rule, Docker's default seccomp), an
  audit hook in each of the trial's Python processes backs up each path before its first change
  (accel/trial/backups.py), and the bench puts them back when the trial ends, however it ended;
- **checked**: a record of the folders the trial can reach (its working folder and the paths its command names,
  accel/bench/file_record.py), taken before and after, names what differs. In the private view a difference is
  someone else's (a file the user edited meanwhile), said beside "isolated". With the hooks, a new path is moved
  into the bench's folder, and a changed or removed one nothing put back stops the bench (`FilesNotKept`).
Passing through to the real files: the bench's own folders the trial writes (its record, the compile caches; `exits`)
and the user's cache folder (~/.cache: a dataset or model downloaded once, not in every trial).

`ACCEL_ISOLATION=hooks` asks for the fallback where namespaces work (what tests do); `namespace` refuses to fall
back. Why this design and its cost per trial: docs/architecture.md."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import trial_variables
from ..errors import AccelError
from . import file_record
from .records import Trial

ENTER = Path(__file__).resolve().parents[1] / "trial" / "room_enter.py"  # run as a file: nothing imports the trial
CHOICE = "ACCEL_ISOLATION"  # namespace | hooks: the mechanism asked for (default: namespace where it works)
MECHANISMS = ("namespace", "hooks")
CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")  # the bench's compile caches (trial_process.trial_env)
NAMED = 10  # paths a message names at most


class FilesNotKept(AccelError):
    """A trial changed a file of the user's that could not be put back."""


@dataclass
class Kept:
    """What a trial's room kept: `said` for the report, `lost` the paths nothing could put back."""

    mechanism: str
    left_behind: Path
    restored: int = 0
    moved: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # changed meanwhile, not by the isolated trial
    cut: bool = False

    def said(self) -> str:
        held = "isolated" if self.mechanism == "namespace" else f"restored {self.restored} files"
        moved = f", {len(self.moved)} new files it left moved to {self.left_behind}" if self.moved else ""
        outside = f", {len(self.outside)} changed meanwhile outside the trial: {', '.join(self.outside[:NAMED])}"
        cut = f" (checked in part: more than {file_record.LIMIT} paths)" if self.cut else ""
        return held + moved + (outside if self.outside else "") + cut


# what the check runs in a view: a folder removed (an overlay whose upper layer takes no user attributes, tmpfs before
# Linux 6.6, fails there with EIO) and a file written, neither of which may reach the real folder
TRIED = "import os, sys; os.rmdir(os.path.join(sys.argv[1], 'folder')); open(os.path.join(sys.argv[1], 'file'), 'w')"


@functools.cache
def namespace_refusal() -> str | None:
    """Why this machine gives no trial a private view of the file system (None: it does), tried once."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    with tempfile.TemporaryDirectory(prefix="accel-room-") as folder:
        real, stage = Path(folder, "real"), Path(folder, "stage")
        (real / "folder").mkdir(parents=True)
        stage.mkdir()
        command = [sys.executable, "-I", "-S", "-c", TRIED, str(real)]
        tried = subprocess.run(_entered(stage, [], command), capture_output=True, text=True)
        if tried.returncode != 0:
            return (tried.stderr.strip().splitlines() or ["unknown"])[-1]
        if not (real / "folder").is_dir() or (real / "file").exists():
            return "a write in the view reached the real folder"
    return None


def mechanism() -> str:
    """The mechanism a trial's room uses here: the one asked for (ACCEL_ISOLATION), else namespace where it works."""
    asked = os.environ.get(CHOICE, "")
    if asked and asked not in MECHANISMS:
        raise AccelError(f"{CHOICE}={asked}: say one of {', '.join(MECHANISMS)}.")
    if asked == "hooks" or (not asked and namespace_refusal() is not None):
        return "hooks"
    if namespace_refusal() is not None:
        raise AccelError(f"{CHOICE}=namespace, but {namespace_refusal()}; leave {CHOICE} unset to fall back.")
    return "namespace"


def _entered(stage: Path, exits: list[Path], argv: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", str(ENTER), str(stage), *map(str, exits), "--", *argv]


def exits(env: dict[str, str]) -> list[Path]:
    """The real folders a trial writes through to, its own first (where its room's files go): its record's (or a
    profile's output folder), the compile caches, the user's cache folder where there is one."""
    own = os.path.dirname(env[trial_variables.PATH]) if env.get(trial_variables.PATH) else _profile_out(env)
    folders = [own, *(env[name] for name in CACHES if env.get(name))]
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    cache = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    folders += [cache] if os.path.isdir(cache) else []
    real = [Path(os.path.realpath(folder)) for folder in folders]
    return [real[0], *(p for p in file_record.outermost(real) if p != real[0])]


def _profile_out(env: dict[str, str]) -> str:
    return json.loads(env[trial_variables.PROFILE])["out"]  # accel/profile/script.py's Window


def held(trials: list[Trial]) -> str | None:
    """What kept the user's files over a bench's script trials, for its report: "isolated", "restored 3 files"."""
    said = [t.files for t in trials if t.files]
    if not said:
        return None
    if all(s.startswith("isolated") for s in said):
        return "isolated"
    return f"restored {sum(t.files_restored or 0 for t in trials)} files"


class Room:
    """One trial's room: entered around its process (`entered`), then `kept` says what held."""

    def __init__(self, command: list[str], cwd: Path | None, left_behind: Path) -> None:
        self.reachable = file_record.reachable(command, Path(os.path.abspath(cwd or os.getcwd())))
        self.left_behind = left_behind
        self.kept: Kept | None = None
        # while entered with a private view: its stage and exits, for a trial forked from a zygote to enter itself
        self.view: tuple[str, list[str]] | None = None

    @contextmanager
    def entered(self, argv: list[str], env: dict[str, str]) -> Iterator[tuple[list[str], dict[str, str]]]:
        """The trial's command and environment in the room; on leaving, the user's files put back and checked
        (FilesNotKept when one could not be)."""
        how, through = mechanism(), exits(env)
        folder = Path(tempfile.mkdtemp(prefix="room-", dir=through[0]))
        before = file_record.record(self.reachable, [*through, folder])
        journal = folder / "journal.jsonl"
        if how == "namespace":
            argv, self.view = _entered(folder, through, argv), (str(folder), [str(p) for p in through])
        else:
            env = env | {
                trial_variables.JOURNAL: str(journal),
                trial_variables.EXITS: os.pathsep.join(map(str, through)),
            }
        try:
            yield argv, env
        finally:
            self.view = None
            restored = restore(str(journal))
            after = file_record.record(self.reachable, [*through, folder])
            shutil.rmtree(folder, ignore_errors=True)
            self.kept = self._check(how, restored, before, after)

    def _check(self, how: str, restored: int, before, after) -> Kept:
        differences = file_record.compare(before, after)
        kept = Kept(how, self.left_behind, restored, cut=before.cut or after.cut)
        changed = [f"{p} (changed)" for p in differences.changed] + [f"{p} (removed)" for p in differences.removed]
        if how == "namespace":  # the view kept every write of the trial's out: these were someone else's (an editor)
            kept.outside = changed + [f"{p} (added)" for p in differences.added]
            return kept
        kept.moved = [self._move_aside(path) for path in differences.added]
        kept.lost = changed
        if kept.lost:
            raise FilesNotKept(_lost_message(kept))
        return kept

    def _move_aside(self, path: str) -> str:
        """A path the trial left behind, moved into the bench's folder (never deleted: it may be someone else's)."""
        target = self.left_behind / path.lstrip(os.sep)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
        return path


def restore(journal: str) -> int:
    """Put back every path the trial's journal (written by accel/trial/backups.py) names as it was before the
    trial's first change to it, latest change first; the number of paths put back."""
    try:
        with open(journal) as f:
            entries = [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return 0
    first: dict[str, str | None] = {}
    for entry in entries:
        first.setdefault(entry["path"], entry["backup"])
    for path, backup in reversed(first.items()):
        _clear(path)
        if backup is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.move(backup, path)
    return len(first)


def _clear(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _lost_message(kept: Kept) -> str:
    more = len(kept.lost) - NAMED
    named = "\n  ".join(kept.lost[:NAMED]) + (f"\n  ... {more} more" if more > 0 else "")
    why = namespace_refusal() or f"{CHOICE}=hooks asked for none"
    return (
        "a trial changed files of yours that accel could not put back, through code Python's audit hooks do not see "
        f"(native code, a program the script ran), since the trial had no private view of the file system ({why}) "
        f"(or you changed them yourself while it ran):\n  {named}\n"
        "accel stopped here. Restore them from your copy or version control; run the bench where user namespaces "
        "are allowed (sysctl kernel.unprivileged_userns_clone=1, or AppArmor's "
        "kernel.apparmor_restrict_unprivileged_userns=0) to keep every write in the trial's own view."
    )
