"""`accel bench --bisect GOOD..BAD`: the first commit that made the script slower, by binary search.

Every comparison is a bench of two revisions (GOOD and the commit in the middle of what is left), interleaved as
any bench's; a commit counts as slower when its interval lies beyond the allowed slowdown (`rev_compare.judge`).
GOOD stays the reference of every comparison, so a slowdown that came in small steps is found where it first
exceeds the threshold. BAD is taken as slower until a comparison shows otherwise; it is measured only when every
commit before it was not slower, so n commits take about log2(n) comparisons. Each comparison is one bench that
adds rounds until its interval decides (accel/bench/decide.py, up to --max-trials and --budget: every reading of
the comparison pooled). One that still cannot tell (a busy machine withholds its verdict, or its interval
straddles the threshold) stops the search there and says which commits remain: a guess would send the rest of
the search the wrong way and name a commit with the authority of a measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..io import strict_json, write_atomic
from .records import Report, RevisionReading
from .rev_compare import Judged, judge
from .revisions import Revision

Compare = Callable[[Revision, Revision, Path], Report]  # (reference, candidate, its report's folder) -> report


@dataclass
class Step:
    """One comparison the bisection made."""

    candidate: Revision
    reading: RevisionReading | None
    judged: Judged
    out: Path

    @property
    def slower(self) -> bool:
        return self.judged == Judged.SLOWER


@dataclass
class Bisection:
    good: Revision
    bad: Revision
    steps: list[Step] = field(default_factory=list)
    first_slower: Revision | None = None
    said: str = ""
    remaining: list[Revision] = field(default_factory=list)  # where a search that could not tell stopped


def bisect(
    commits: list[Revision], allowed: float, compare: Compare, out: Path, say: Callable[[str], None]
) -> Bisection:
    """Search `commits` (GOOD first, BAD last) for the first one slower than GOOD by more than `allowed`; `say`
    gets a line for each comparison as it ends."""
    good, candidates = commits[0], commits[1:]
    found = Bisection(good, candidates[-1])
    fast, slow, bad_seen = -1, len(candidates) - 1, False  # candidates[slow]: the first slower one so far
    while True:
        if slow - fast > 1:
            index = (fast + slow) // 2
        elif not bad_seen and slow == len(candidates) - 1:
            index = slow  # every commit before BAD was not slower: is BAD?
        else:
            break
        number = len(found.steps) + 1
        step = _step(good, candidates[index], allowed, compare, out / f"{number:02d}-{candidates[index].name}", say)
        found.steps.append(step)
        if step.judged in (Judged.FAILED, Judged.CANNOT_TELL):  # failed, interrupted, or undecided
            found.remaining = candidates[fast + 1 : slow + 1]
            found.said = _stopped(step, found.remaining, allowed, good)
            return _written(found, out)
        bad_seen = bad_seen or index == len(candidates) - 1
        if step.slower:
            slow = index
        else:
            fast = index
        if index == len(candidates) - 1 and not step.slower:
            found.said = (
                f"{found.bad.label} is not slower than {good.label} by more than {allowed:.0%}: nothing to find"
            )
            return _written(found, out)
    found.first_slower = candidates[slow]
    found.said = f"first slower commit: {candidates[slow].label}, after {len(found.steps)} comparisons"
    return _written(found, out)


def _step(good: Revision, candidate: Revision, allowed: float, compare: Compare, out: Path, say) -> Step:
    report = compare(good, candidate, out)
    reading = (report.revision_readings or [None])[0]
    if report.interrupted or reading is None:  # no reading: the search stops here
        say(f"interrupted while comparing {candidate.label}")
        return Step(candidate, None, Judged.CANNOT_TELL, out)
    judged = judge(reading.ratio, allowed)
    say(f"comparison {out.name.split('-')[0]}: {reading.said} -> {judged}")
    return Step(candidate, reading, judged, out)


def _stopped(step: Step, remaining: list[Revision], allowed: float, good: Revision) -> str:
    """Where a search that could not go on stopped, and the commits among which the first slower one still is."""
    why = step.reading.said if step.reading is not None else "interrupted"
    if step.judged == Judged.FAILED:
        head = f"stopped: {step.candidate.label} could not be compared ({why})"
    else:
        head = (
            f"stopped: cannot tell whether {step.candidate.label} is slower than {good.label} by more than "
            f"{allowed:.0%} ({why})"
        )
    said = ", ".join(r.label for r in remaining[:8]) + (f" and {len(remaining) - 8} more" if len(remaining) > 8 else "")
    return (
        f"{head}. The first slower commit, if any, is one of these {len(remaining)}: {said}. Nothing is named "
        "without a decided comparison: run the search again on a quieter machine, with a larger --budget or "
        "--max-trials, or over the commits that remain."
    )


def _written(found: Bisection, out: Path) -> Bisection:
    """bisect.json: each comparison, its reading and its verdict, and the conclusion."""
    data = {
        "good": found.good.commit,
        "bad": found.bad.commit,
        "first_slower": found.first_slower.commit if found.first_slower else None,
        "said": found.said,
        "remaining": [r.commit for r in found.remaining],
        "comparisons": [
            {
                "commit": s.candidate.commit,
                "label": s.candidate.label,
                "judged": str(s.judged),
                "said": s.reading.said if s.reading else None,
                "ratio": s.reading.ratio.to_data() if s.reading else None,
                "report": str(s.out),
            }
            for s in found.steps
        ],
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "bisect.json", strict_json(data, indent=2) + "\n")
    return found
