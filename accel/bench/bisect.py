"""`accel bench --bisect GOOD..BAD`: the first commit that made the script slower, by binary search.

Every comparison is a bench of two revisions (GOOD and the commit in the middle of what is left), interleaved as
any bench's; a commit counts as slower when its interval lies beyond the allowed slowdown (`rev_compare.judge`).
GOOD stays the reference of every comparison, so a slowdown that came in small steps is found where it first
exceeds the threshold. BAD is taken as slower until a comparison shows otherwise; it is measured only when every
commit before it was not slower, so n commits take about log2(n) comparisons. A comparison that cannot tell (a
busy machine withholds its verdict, or its interval straddles the threshold) is measured again, up to `AGAIN`
times: a bisection decides every step, so a wrong guess would send the rest of it the wrong way; after that its
median decides, and the step says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..io import strict_json, write_atomic
from .records import Report, RevisionReading
from .rev_compare import Judged, judge
from .revisions import Revision

AGAIN = 2  # a comparison that cannot tell is measured again this many times before its median decides
Compare = Callable[[Revision, Revision, Path], Report]  # (reference, candidate, its report's folder) -> report


@dataclass
class Step:
    """One comparison the bisection made."""

    candidate: Revision
    reading: RevisionReading | None
    judged: Judged
    by_median: bool  # the interval could not tell: its median decided
    out: Path
    benches: int = 1  # with those measured again

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
        if step.judged in (Judged.FAILED, Judged.CANNOT_TELL):  # failed, or interrupted
            found.said = f"stopped: {candidates[index].label} could not be compared ({_why(step)})"
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
    unsure = " (some comparisons were decided by their median: check it with --rev)" if _unsure(found) else ""
    benches = sum(s.benches for s in found.steps)
    again = f" ({benches} benches, with those measured again)" if benches > len(found.steps) else ""
    found.said = f"first slower commit: {candidates[slow].label}, after {len(found.steps)} comparisons{again}{unsure}"
    return _written(found, out)


def _step(
    good: Revision, candidate: Revision, allowed: float, compare: Compare, out: Path, say, again: int = AGAIN
) -> Step:
    report = compare(good, candidate, out)
    reading = (report.revision_readings or [None])[0]
    if report.interrupted or reading is None:  # no reading: the search stops here
        say(f"interrupted while comparing {candidate.label}")
        return Step(candidate, None, Judged.CANNOT_TELL, False, out)
    judged, by_median = judge(reading.ratio, allowed), False
    if judged == Judged.CANNOT_TELL and again > 0:  # a busy spell or a wide interval: measure once more
        say(f"comparison {out.name.split('-')[0]}: {reading.said}; cannot tell yet, measuring again")
        step = _step(good, candidate, allowed, compare, out.with_name(f"{out.name}-again"), say, again - 1)
        step.benches += 1
        return step
    if judged == Judged.CANNOT_TELL:
        by_median = True
        judged = Judged.SLOWER if reading.ratio.median < 1 - allowed else Judged.NOT_SLOWER
    tag = " (by its median: the interval could not tell)" if by_median else ""
    say(f"comparison {out.name.split('-')[0]}: {reading.said} -> {judged}{tag}")
    return Step(candidate, reading, judged, by_median, out)


def _why(step: Step) -> str:
    return step.reading.said if step.reading is not None else "interrupted"


def _unsure(found: Bisection) -> bool:
    return any(s.by_median for s in found.steps)


def _written(found: Bisection, out: Path) -> Bisection:
    """bisect.json: each comparison, its reading and its verdict, and the conclusion."""
    data = {
        "good": found.good.commit,
        "bad": found.bad.commit,
        "first_slower": found.first_slower.commit if found.first_slower else None,
        "said": found.said,
        "comparisons": [
            {
                "commit": s.candidate.commit,
                "label": s.candidate.label,
                "judged": str(s.judged),
                "by_median": s.by_median,
                "benches": s.benches,
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
