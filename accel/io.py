"""Files accel writes: atomically (a reader never sees half a file), as JSON every parser reads, and where
output goes when no --out is given. Every writer in the package comes here."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .errors import AccelError, disk_full

RUNS = Path("runs")  # where a run, a bench or a tune goes without --out, relative to the working directory
# mkstemp makes files only their owner can read; a written file gets the mode open() would give it. The umask is
# read once, here: setting it to read it is not thread-safe
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextmanager
def atomic_file(target: Path, mode: str = "wb") -> Iterator[IO]:
    """A handle on a temporary file beside `target` that replaces it, flushed to disk, when the block ends; on any
    error (Ctrl-C too) the temporary file is removed and `target` is untouched."""
    target = Path(target)
    # same directory: os.replace is atomic only within one file system; `.NAME.*.tmp` is what
    # RunDir.remove_stale_temp_files finds after a killed process
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(target: Path, text: str) -> Path:
    """Write `text` to `target` through a temporary file and a rename: a reader never sees half a file."""
    target = Path(target)
    try:
        with atomic_file(target, "w") as handle:
            handle.write(text)
    except OSError as err:
        if disk_full(err):
            kept = "its previous version is intact" if target.exists() else "nothing was written"
            raise AccelError(
                f"Disk full: could not write {target} ({len(text.encode()):,} bytes); {kept}. Free "
                f"space in {target.parent}."
            ) from None
        raise
    return target


def append_lines(target: Path, lines: list[str]) -> bool:
    """Append whole lines to `target` (made if missing) in one write, flushed to disk: no reader sees half a line
    but one a writer killed midway left, and such a cut last line is closed first, so a new line is never glued
    onto it. Whether it was."""
    data = "".join(line + "\n" for line in lines).encode()
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        cut = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        data = b"\n" * cut + data
        while data:  # one write, but for a disk that fills midway (the next write then raises)
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return cut


def strict_json(data: Any, **kwargs: Any) -> str:
    """JSON that every parser reads: NaN and infinities (a diverged loss) become null, other objects their str()."""
    return json.dumps(finite(data), default=str, allow_nan=False, **kwargs)


def finite(value: Any) -> Any:
    """`value` with every non-finite float, however deeply nested, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {_json_key(key): finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def _json_key(key: Any) -> Any:
    # json.dumps writes these key types itself and refuses others (a tuple): those become their str()
    return key if key is None or isinstance(key, (str, int, float, bool)) else str(key)


def check_creatable(path: str | Path, flag: str = "--out") -> None:
    """Refuse an output path whose folder cannot be made: one under a regular file, or in a folder this user may
    not write. Called before the work starts: mkdir would otherwise fail only when the first file is written,
    after a run of minutes, as a traceback."""
    path = Path(path)
    check_not_dangling(path, flag)
    nearest = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())  # the root exists
    if not nearest.is_dir():
        raise AccelError(
            f"{flag} {path}: {nearest} is a file, not a folder, so nothing can be written under it. "
            f"Choose another {flag}."
        )
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise AccelError(f"{flag} {path}: this user may not write in {nearest}. Choose another {flag}.")


def check_file_out(path: Path, flag: str) -> None:
    """Refuse an output file's path where no file can be written: a folder, a file this user may not write, or a
    path check_creatable refuses. Called before the work starts, as check_creatable is."""
    if path.is_dir():
        raise AccelError(f"{flag} {path} is a folder; accel writes a file there: name one, e.g. {path / 'NAME'}.")
    if not path.exists():
        check_creatable(path, flag)
    elif not os.access(path, os.W_OK):
        raise AccelError(f"{flag} {path}: this user may not write to it. Choose another {flag}.")


def check_not_dangling(path: Path, flag: str = "--out") -> None:
    """mkdir says "File exists" of a link to nothing: say what is there."""
    if path.is_symlink() and not path.exists():
        raise AccelError(
            f"{flag} {path} is a link to {os.readlink(path)}, which does not exist. Create that folder, or "
            f"choose another {flag}."
        )


def default_out(name: str, kind: str | None = None) -> Path:
    """runs/[<kind>-]<name>-<timestamp>: where `accel train` (no kind), `bench` or `tune` writes without --out."""
    prefix = f"{kind}-" if kind else ""
    return RUNS / f"{prefix}{name}-{time.strftime('%Y%m%d-%H%M%S')}"
