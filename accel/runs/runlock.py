"""One writer per run directory: an OS lock (flock) on DIR/.lock, which the OS releases when its process dies,
so a killed run can be resumed and a living one cannot be written by a second process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import AccelError

LOCK_NAME = ".lock"


class RunDirBusy(AccelError):
    """Another process holds the run directory's lock."""


class RunDirLock:
    """Held from `acquire()` to `release()` or the process's end. While held, the file holds the holder's PID;
    it is emptied on release, so a finished command leaves it as it found it (empty, or absent before)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
        except OSError as err:
            raise AccelError(
                f"cannot lock run directory {self.directory}: {err.strerror or err}. Choose another --out."
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise RunDirBusy(busy_message(self.directory, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # before unlocking: a PID in the file always names the living holder
        os.close(self._fd)  # closing the last descriptor releases the lock
        self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def hold(directory: Path) -> RunDirLock:
    """`directory`, made if missing, with its lock to hold in a `with` block: a bench's or tune's folder, which a
    second command then refuses (`check_free`) while this one writes there."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return RunDirLock(directory)


def check_free(directory: Path, what: str, flag: str = "--out") -> None:
    """Refuse `directory` while a living accel process holds its lock (a bench or tune writing `what` there),
    without creating the lock file."""
    try:
        fd = os.open(Path(directory) / LOCK_NAME, os.O_RDWR)
    except OSError:  # no lock file: no accel process holds the folder
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(fd)
        who, stop = (f"accel process {pid}", f"`kill -INT {pid}`") if pid else ("another accel process", "Ctrl-C")
        raise RunDirBusy(
            f"{directory} is in use: {who} is writing {what} there. Nothing in it was changed. Wait for it to end, "
            f"or stop it ({stop} keeps its finished trials and writes their report), or choose another {flag}."
        ) from None
    finally:
        os.close(fd)  # releases the lock if this call took it


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):  # written a moment from now, or not by accel
        return None


def busy_message(directory: Path, pid: int | None) -> str:
    who = f"accel process {pid}" if pid else "another accel process"
    stop = f"stop it first (`kill -INT {pid}` saves a checkpoint)" if pid else "stop it first"
    return (
        f"{directory} is in use: {who} is writing to it (a run still training, or resuming). Nothing in it was "
        f"changed. Wait for it to end, or {stop} and then continue it with --resume; or use another --out."
    )
