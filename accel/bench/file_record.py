"""A before/after record of the user's files a trial can reach: its working folder and the paths its command
names (an existing file or folder, whole; a path not there yet, as absent). Whichever way the trial was kept
from them (accel/bench/isolation.py), the two records compared say whether it was, and name what was not."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

LIMIT = 100_000  # entries a record reads at most: a folder of a million files is checked in part, and says so


@dataclass(frozen=True)
class Entry:
    """What a change to a path changes: its kind, and a file's size, time of change and mode (a folder's
    contents are entries of their own; its time changes with them, so it is not compared)."""

    kind: str
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    target: str | None = None  # a symbolic link's


@dataclass
class FileRecord:
    entries: dict[str, Entry | None] = field(default_factory=dict)  # None: a named path that was not there
    cut: bool = False  # LIMIT reached: the rest was not read


@dataclass(frozen=True)
class Differences:
    changed: list[str]
    removed: list[str]
    added: list[str]  # the outermost new paths (a new folder, not each file in it)


def reachable(command: list[str], cwd: Path) -> list[Path]:
    """The working folder and every path the command's words name (`--out=runs/a` too), whether there or not."""
    words = [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w for w in command[1:]]
    paths = [cwd] + [cwd / w for w in words if w and not w.startswith("-") and (os.sep in w or (cwd / w).exists())]
    return outermost([Path(os.path.abspath(p)) for p in paths])


def outermost(paths: list[Path]) -> list[Path]:
    """`paths` without those inside another."""
    paths = sorted(dict.fromkeys(paths), key=lambda p: len(p.parts))  # in the order given, outer first
    return [p for i, p in enumerate(paths) if not any(p.is_relative_to(q) for q in paths[:i])]


def record(roots: list[Path], skipped: list[Path]) -> FileRecord:
    """Every path under `roots`, but `skipped` (the bench's own folders) and what is under them."""
    found = FileRecord()
    skip = {os.path.abspath(p) for p in skipped}
    for root in roots:
        _read(str(root), skip, found)
    return found


def _read(path: str, skip: set[str], found: FileRecord) -> None:
    if path in skip or found.cut:
        return
    if len(found.entries) >= LIMIT:
        found.cut = True
        return
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        found.entries[path] = None
        return
    except OSError:
        return  # unreadable: nothing the trial could change through us either
    found.entries[path] = _entry(path, info)
    if stat.S_ISDIR(info.st_mode) and not _unread(path):
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            _read(os.path.join(path, name), skip, found)


def _unread(folder: str) -> bool:
    """A folder whose contents the record leaves out: git's own, a Python environment's (a venv in the project holds
    tens of thousands of files a trial has no business with), Python's bytecode cache (any process importing the
    project's modules rewrites it, the bench's own included) and tools' caches (a linter run meanwhile)."""
    name = os.path.basename(folder)
    tool_cache = name.startswith(".") and name.endswith("_cache")  # .ruff_cache, .pytest_cache, .mypy_cache
    return name in (".git", "__pycache__") or tool_cache or os.path.isfile(os.path.join(folder, "pyvenv.cfg"))


def _entry(path: str, info: os.stat_result) -> Entry:
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return Entry("folder", mode=mode)
    if stat.S_ISLNK(info.st_mode):
        return Entry("link", target=os.readlink(path))
    return Entry("file", info.st_size, info.st_mtime_ns, mode)


def compare(before: FileRecord, after: FileRecord) -> Differences:
    """What differs; a path the cut record did not reach is not called added."""
    changed, removed, added = [], [], []
    for path, was in before.entries.items():
        now = after.entries.get(path)
        if was is None and now is not None:
            added.append(path)
        elif was is not None and now is None and (path in after.entries or not after.cut):
            removed.append(path)
        elif was != now and was is not None and now is not None:
            changed.append(path)
    new = {p for p, e in after.entries.items() if p not in before.entries and e is not None and not before.cut}
    added += [p for p in new if os.path.dirname(p) not in new]
    return Differences(changed, removed, sorted(added))
