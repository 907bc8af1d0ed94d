"""A history of a script's speed per commit per machine: `accel bench --history FILE.jsonl` appends one line per
revision (and --vary combination) it measured; `accel history FILE` reads them (accel/bench/history_report.py).

A line holds the commit (its hash, subject and date), when it was measured, the machine's fingerprint (CPU or GPU
model, torch version, thread count: figures from two machines are never one series) and the figures: median
samples/s with its interval, and the time to the target where one was measured; and how far the reading can be
trusted: `busy` (others' share of the cores during its trials, set only then) and, for each revision read against
the bench's first, that reading (`against`, `ratio`, `verdict`; `undecided` where its interval could not decide).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError, field_validator

from ..errors import AccelError
from ..io import append_lines, check_file_out, strict_json
from ..measure import load
from .records import Reading, Record, Report, RevisionRecord
from .rev_compare import SEPARATOR

log = logging.getLogger("accel")


class HistoryEntry(Record):
    """One line of a history file."""

    commit: str | None
    short: str
    subject: str
    commit_date: str | None
    dirty: bool = False  # the working tree with uncommitted changes (`--rev .`)
    measured: str  # when, ISO 8601
    machine: str  # the fingerprint's short hash: one series per machine
    fingerprint: dict[str, Any]
    variant: str
    vary: str = ""  # the --vary values, where the bench had any
    samples_per_s: float | None
    ci95: tuple[float, float] | None
    trials: int
    target: str | None = None
    time_to_target_s: float | None = None
    command: str | None = None
    report: str | None = None  # the bench's folder
    busy: float | None = None  # set only when the machine was busy during its trials: no verdict rests on it
    against: str | None = None  # the revision it was read against (the bench's first), with that reading
    ratio: Reading | None = None
    undecided: bool = False  # its reading decided nothing at the bench's resolution

    @field_validator("samples_per_s", "ci95", "time_to_target_s", "busy")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        """A non-finite figure reads as none, as the writer writes it (JSON has no NaN; a hand-made line may)."""
        numbers = value if isinstance(value, tuple) else (value,)
        return value if all(n is None or math.isfinite(n) for n in numbers) else None

    @property
    def decided_nothing(self) -> bool:
        """A reading no verdict could rest on: a busy machine, or an interval too wide to decide."""
        return self.busy is not None or self.undecided

    @property
    def point(self) -> str:
        """The commit as the history shows it: `3f2a1bc`, `3f2a1bc+` with uncommitted changes."""
        return self.short + ("+" if self.dirty else "")


def fingerprint(env: dict[str, Any]) -> dict[str, Any]:
    """What makes two machines' figures different series: the device, torch, the threads a trial used."""
    return {
        "device": ", ".join(env["gpus"]) if env.get("gpus") else env.get("cpu") or "unknown CPU",
        "torch": env.get("torch"),
        "threads": env.get("torch_threads"),
    }


def machine_id(prints: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(prints, sort_keys=True).encode()).hexdigest()[:8]


def machine_said(prints: dict[str, Any]) -> str:
    return f"{prints.get('device')}, torch {prints.get('torch')}, {prints.get('threads')} threads"


def entries(report: Report, out: Path) -> list[HistoryEntry]:
    """A line for each revision's variant of a finished bench."""
    prints = fingerprint(report.env)
    measured = report.finished or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    target = report.settings.target if report.settings else None
    revisions = {r.name: r for r in report.revisions or []}
    readings = {r.variant: r for r in report.revision_readings or []}
    found = []
    for variant in report.variants:
        name, _, vary = variant.name.partition(SEPARATOR)
        revision = revisions.get(name)
        if revision is None:
            continue
        entry = _entry(revision, variant, vary, prints, measured, target, report, out)
        reading = readings.get(variant.name)
        if reading is not None:
            said = reading.ratio
            entry = entry.model_copy(
                update={"against": reading.against, "ratio": said, "undecided": bool(said.undecided)}
            )
        found.append(entry)
    return found


def _entry(revision: RevisionRecord, variant, vary, prints, measured, target, report, out) -> HistoryEntry:
    sps = variant.samples_per_s
    busy = max((t.load["others_share"] for t in variant.trials if t.ok and load.busy(t.load)), default=None)
    return HistoryEntry(
        commit=revision.commit,
        short=revision.name if revision.commit is None or revision.spec != "." else revision.commit[:7],
        subject=revision.subject,
        commit_date=revision.date,
        dirty=revision.dirty,
        measured=measured,
        machine=machine_id(prints),
        fingerprint=prints,
        variant=variant.name,
        vary=vary,
        samples_per_s=sps.median,
        ci95=sps.ci95,
        trials=variant.ok_trials,
        target=target,
        time_to_target_s=variant.time_to_target_s,
        command=report.command,
        report=str(Path(out).resolve()),
        **({"busy": busy} if busy is not None else {}),
    )


def check_appendable(path: Path) -> None:
    """Refuse a --history no line could be appended to, before the first trial: a folder, a path no file can be
    made at, a file this user may not write, or one that is not a history (a line `read` refuses); a last line a
    killed writer left cut is said, and `append` starts on a line of its own."""
    check_file_out(path, "--history")
    if not path.exists():
        return
    text = _text(path)
    _, cut = _entries(path, text)  # a file that is not a history is refused now, not appended to after the trials
    if cut and cut[-1] == text.count("\n") + 1:  # its last line, with no newline after it
        log.warning(
            "%s:%d, its last line, was cut (a writer killed midway): it is kept as it is, the new lines start on a "
            "line of their own, and `accel history` leaves the cut one out",
            path,
            cut[-1],
        )


def append(path: Path, found: list[HistoryEntry]) -> bool:
    """Append the lines, whole, in one write (a history is only ever added to); whether a cut last line had to be
    closed first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return append_lines(path, [strict_json(entry.to_data()) for entry in found])
    except OSError as err:
        raise AccelError(f"could not append to the history {path}: {err.strerror or err}.") from None


def read(path: Path) -> list[HistoryEntry]:
    """Every entry of a history file; a line that is not an entry is an error naming its line, but one a killed
    writer left cut, which is said and left out."""
    found, cut = _entries(path, _text(path))
    for number in cut:
        log.warning("%s:%d was cut (a writer killed midway): left out", path, number)
    if not found:
        raise AccelError(f"{path} holds no measurement yet: `accel bench --rev . --history {path} -- ...` adds one.")
    return found


def _entries(path: Path, text: str) -> tuple[list[HistoryEntry], list[int]]:
    """The file's entries, and the numbers of its cut lines."""
    found, cut = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            found.append(HistoryEntry.model_validate_json(line))
        except ValidationError as err:
            if not _cut(line):
                raise AccelError(
                    f"{path}:{number} is not a line `accel bench --history` writes: {err.errors()[0]['msg']}"
                ) from None
            cut.append(number)
    return found, cut


def _text(path: Path) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise AccelError(f"cannot read the history {path}: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise AccelError(
            f"{path}:{line} is not a line `accel bench --history` writes: not UTF-8 text (byte {err.start})"
        ) from None


def _cut(line: str) -> bool:
    """What a writer killed midway leaves: the start of a JSON object, not all of one."""
    if not line.startswith("{"):
        return False
    try:
        json.loads(line)
    except ValueError:
        return True
    return False
