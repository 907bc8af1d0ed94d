"""The fallback of a trial's room where the kernel gives it no private view of the file system (accel/bench/
isolation.py): a Python audit hook in every process of the trial backs up each path before the trial's first change
to it and journals it; the bench restores them all when the trial ends, however it ended (isolation's `restore`).

What Python's audit events show is covered whoever calls it (open for writing, os.remove, os.rename/replace,
os.truncate, os.rmdir, os.mkdir, os.link, os.symlink, shutil.rmtree; shutil, pathlib and numpy's `tofile` go
through them), and torch's own file writer, which is native code, is made to raise the same `open` event. Other
native writers (safetensors, a program the script runs) are not seen: the bench's before/after record names what
they changed (accel/bench/file_record.py). Torch-free: loaded by sitecustomize before the script's first line."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading

from ..engine.trial_variables import EXITS, JOURNAL

SYSTEM = ("/proc/", "/dev/", "/sys/")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Backups:
    """This process's side: what it backed up, and where."""

    def __init__(self, journal: str, exits: list[str]) -> None:
        self.journal, self.folder = journal, os.path.join(os.path.dirname(journal), "backups")
        self.skipped = tuple(os.path.join(p, "") for p in [*exits, os.path.dirname(journal)]) + SYSTEM
        self.seen: set[str] = set()
        self.trees: tuple[str, ...] = ()  # folders backed up whole (shutil.rmtree): what is inside is covered
        self.busy = threading.local()
        self.count = 0
        os.makedirs(self.folder, exist_ok=True)

    def __call__(self, event: str, args: tuple) -> None:
        handler = HANDLERS.get(event)
        if handler is None or getattr(self.busy, "on", False):
            return
        self.busy.on = True  # the backups' own file calls raise events too
        try:
            handler(self, *args)
        except Exception:  # noqa: BLE001 - never break the script; the bench's record names what was not kept
            pass
        finally:
            self.busy.on = False

    def keep(self, path: str, how: str) -> None:
        """Back `path` up before its first change: `how` is "move" (it is about to be truncated), "link" (about to
        be removed or renamed: a hard link keeps its bytes) or "copy" (about to change in place)."""
        if path in self.seen or path.startswith(self.skipped) or path.startswith(self.trees):
            return
        self.seen.add(path)
        if not os.path.lexists(path):
            return self._journal(path, None)
        if not (os.path.isfile(path) or os.path.isdir(path) or os.path.islink(path)):
            return  # a pipe or a socket: nothing to keep, and moving it would break it
        backup = os.path.join(self.folder, f"{os.getpid()}-{self.count}")
        self.count += 1
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.copytree(path, backup, symlinks=True, copy_function=_link_or_copy)
            self.trees += (os.path.join(path, ""),)
        elif how == "copy":
            shutil.copy2(path, backup, follow_symlinks=False)
        else:
            _move_or_copy(path, backup, how)
        self._journal(path, backup)

    def _journal(self, path: str, backup: str | None) -> None:
        line = json.dumps({"path": path, "backup": backup}) + "\n"
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write: the trial's processes append whole lines
        finally:
            os.close(fd)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # another file system
        shutil.copy2(src, dst, follow_symlinks=False)


def _move_or_copy(path: str, backup: str, how: str) -> None:
    try:
        (os.rename if how == "move" else os.link)(path, backup)
    except OSError:  # another file system: the bytes are copied
        shutil.copy2(path, backup, follow_symlinks=False)


def _path(where, dir_fd=None, follow: bool = False) -> str | None:
    """The absolute path of an event's argument (None: a file descriptor); the last part followed only where
    `follow` (an open writes through a symbolic link; a removal or a rename acts on the link)."""
    if isinstance(where, int) or where is None:
        return None
    path = os.fsdecode(where)
    if dir_fd not in (None, -1) and not os.path.isabs(path):  # -1: no folder given
        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    path = os.path.abspath(path)
    if follow:
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _opened(backups: Backups, where, mode, flags) -> None:
    if mode is not None:
        writes, truncates = any(c in mode for c in "wax+"), "w" in mode
    else:
        writes, truncates = bool(flags & WRITE_FLAGS), bool(flags & os.O_TRUNC) and bool(flags & os.O_CREAT)
    path = _path(where, follow=True) if writes else None
    if path is not None:
        backups.keep(path, "move" if truncates else "copy")  # a truncating open needs no bytes: the file moves


def _removed(backups: Backups, where, dir_fd=None) -> None:
    path = _path(where, dir_fd)
    if path is not None:
        backups.keep(path, "link")


def _renamed(backups: Backups, src, dst, src_dir_fd=None, dst_dir_fd=None) -> None:
    for where, fd in ((src, src_dir_fd), (dst, dst_dir_fd)):
        _removed(backups, where, fd)


def _created(backups: Backups, src, dst, *fds) -> None:  # os.link, os.symlink: only `dst` is new
    _removed(backups, dst, fds[-1] if fds else None)


def _truncated(backups: Backups, where, length) -> None:
    path = _path(where, follow=True)
    if path is not None:
        backups.keep(path, "copy")


def _made(backups: Backups, where, mode=None, dir_fd=None) -> None:
    path = _path(where, dir_fd)
    if path is not None and not os.path.lexists(path):  # an existing folder stays as it is (makedirs, exist_ok)
        backups.keep(path, "link")


HANDLERS = {
    "open": _opened,
    "os.remove": _removed,
    "os.rmdir": _removed,
    "shutil.rmtree": _removed,
    "os.rename": _renamed,
    "os.link": _created,
    "os.symlink": _created,
    "os.truncate": _truncated,
    "os.mkdir": _made,
}


def start() -> None:
    """In a trial's process under this fallback: the hook, for the process's life (an audit hook cannot be
    removed)."""
    journal = os.environ.get(JOURNAL)
    if journal:
        exits = [p for p in os.environ.get(EXITS, "").split(os.pathsep) if p]
        sys.addaudithook(Backups(journal, exits))


def see_torch_writes(torch) -> None:
    """torch.save's file writer is native code: it raises Python's `open` event for its path first, as Python's
    own writers do, so the hook sees it (torch.save and torch.serialization.save alike)."""
    writer = torch.serialization._open_zipfile_writer_file
    native_init = writer.__init__

    def opened(self, name, *args, **kwargs):
        sys.audit("open", name, "wb", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        native_init(self, name, *args, **kwargs)

    writer.__init__ = opened
