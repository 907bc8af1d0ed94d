"""Revisions read against the first one: "B is 7% slower than A [4%, 10%]", and what `--fail-if-slower` and a
bisection make of it. Pure: the trials were run and summarised by the bench as variants (accel/bench/runner.py).

A revision's variant `B` (or `B,VARY` with --vary) is read against the first revision's variant of the same
--vary values, through the bench's own reading (accel/bench/summary.py's `versus`): the ratio of median
samples/s with its bootstrap interval, no verdict when the machine was busy or a side has fewer than 2 trials.
"Slower" is throughput lost: 0.93x the samples/s is 7% slower.
"""

from __future__ import annotations

from enum import StrEnum

from ..errors import AccelError
from .decide import DEFAULT_RULE, Rule
from .records import Reading, Report, RevisionReading, Verdict
from .summary import versus

SEPARATOR = ","  # between a revision's name and its --vary values in a variant's name
CANNOT_TELL_EXIT = 4  # --fail-if-slower and --bisect: the run could not tell (docs/bench.md); 1 is "slower"


class Judged(StrEnum):
    """What an interval says of "slower by more than the threshold"."""

    SLOWER = "slower"
    NOT_SLOWER = "not slower"
    CANNOT_TELL = "cannot tell"
    FAILED = "failed"  # a side has no successful trial


def variant_name(revision: str, combo: str = "") -> str:
    return f"{revision}{SEPARATOR}{combo}" if combo else revision


def parse_share(text: str) -> float:
    """`3%` or `3` as 0.03: the slowdown --fail-if-slower allows."""
    try:
        share = float(text.strip().removesuffix("%")) / 100
    except ValueError:
        share = -1.0
    if not 0 <= share < 1:
        raise AccelError(f"--fail-if-slower {text!r}: give a percentage from 0 to below 100, e.g. 3% or 5%.")
    return share


def _pct(x: float) -> str:
    return f"{x:.1%}" if abs(x) < 0.1 else f"{x:.0%}"


def sentence(name: str, against: str, reading: Reading, changed: bool | None) -> str:
    """The comparison in words, with its interval and the results-changed flag."""
    m, ci = reading.median, reading.ci95
    if m is None or ci is None:
        return f"{name} was not compared with {against}: one of them has no successful trial (see Failed trials)"
    lo, hi = ci
    if reading.verdict == Verdict.HURT:
        said = (
            f"{name} is {_pct(1 - m)} slower than {against} [{_pct(1 - hi)}, {_pct(1 - lo)}] ({m:.2f}x the samples/s)"
        )
    elif reading.verdict == Verdict.HELPED:
        said = (
            f"{name} is {_pct(m - 1)} faster than {against} [{_pct(lo - 1)}, {_pct(hi - 1)}] ({m:.2f}x the samples/s)"
        )
    elif reading.verdict == Verdict.NO_EFFECT:
        said = f"no measurable difference between {name} and {against}: {reading.text()} the samples/s"
    else:
        said = f"{name} against {against}: {reading.text()} the samples/s, no verdict: {withheld(reading)}"
    return said + ("; its results changed (final loss or metric beyond noise)" if changed else "")


def withheld(reading: Reading) -> str:
    """Why a reading has no verdict, and what would give it one."""
    if reading.busy:
        return f"busy machine (others took {reading.busy:.0%} of the cores)"
    if reading.undecided:
        need = f"; about {reading.trials_needed} trials a side would tell" if reading.trials_needed else ""
        return f"cannot tell at +-{reading.undecided:.0%}: the interval is wider than that{need}"
    return "too few trials"


def read_revisions(report: Report, pairs: list[tuple[str, str]], rule: Rule = DEFAULT_RULE) -> list[RevisionReading]:
    """Each (variant, the first revision's variant) pair read from the report's trials by the bench's rule."""
    rows = report.by_name
    out = []
    for name, against in pairs:
        reading, changed = versus(rows[name].trials, rows[against].trials, rule)
        out.append(
            RevisionReading(
                variant=name,
                against=against,
                ratio=reading,
                result_changed=changed,
                said=sentence(name, against, reading, changed),
            )
        )
    return out


def judge(reading: Reading, allowed: float) -> Judged:
    """SLOWER when the whole interval lies beyond `allowed` slowdown, NOT_SLOWER when none of it does: the gate's
    one-sided question, which an interval too wide for the two-sided verdict may still answer. A busy machine, too
    few trials or an interval across the line cannot tell."""
    if reading.median is None:
        return Judged.FAILED
    if reading.ci95 is None or reading.busy is not None or (reading.verdict is None and not reading.undecided):
        return Judged.CANNOT_TELL
    lo, hi = reading.ci95
    if hi < 1 - allowed:
        return Judged.SLOWER
    return Judged.NOT_SLOWER if lo >= 1 - allowed else Judged.CANNOT_TELL


def gate(readings: list[RevisionReading], allowed: float) -> tuple[int, list[str]]:
    """--fail-if-slower: exit 1 when an interval says a revision is slower than the first by more than `allowed`
    (or it did not run at all); CANNOT_TELL_EXIT when none is but some comparison could not tell; else 0. A line
    for each revision; one that could not tell says what would."""
    code, lines = 0, []
    for r in readings:
        judged = judge(r.ratio, allowed)
        limit = f"more than {_pct(allowed)}"
        if judged == Judged.SLOWER:
            code, said = 1, f"FAIL: {r.variant} is slower than {r.against} by {limit}: {r.said}"
        elif judged == Judged.FAILED:
            code, said = 1, f"FAIL: {r.said}: a revision that does not train cannot pass"
        elif judged == Judged.NOT_SLOWER:
            said = f"ok: {r.variant} is not slower than {r.against} by {limit}"
        else:
            code = code or CANNOT_TELL_EXIT
            said = (
                f"CANNOT TELL: whether {r.variant} is slower than {r.against} by {limit} ({r.said}); exit "
                f"{CANNOT_TELL_EXIT}, neither passed nor failed. {_to_tell(r.ratio)}"
            )
        lines.append(said)
    return code, lines


def _to_tell(reading: Reading) -> str:
    if reading.busy:
        return "Run it again when the machine is quiet."
    if reading.trials_needed:
        need = reading.trials_needed
        return f"About {need} trials a side would tell on this noise (--trials {need})."
    return "Run it again with more trials on a quiet machine."


def revision_lines(report: Report) -> list[str]:
    """The revisions compared (short hash and subject) and each reading, for report.md and the summary."""
    if not report.revisions:
        return []
    lines = [f"{r.label}{', the reference' if i == 0 else ''}" for i, r in enumerate(report.revisions)]
    return lines + [r.said for r in report.revision_readings or []]
