"""What an A/A bench (`accel bench --aa`) says of the machine: the noise between two neighbouring trials of the
same thing, and the trials and minutes a verdict at 3%, 5% and 10% would take at that noise (accel/bench/decide.py).
Written to OUT/noise.json beside the report."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..io import strict_json, write_atomic
from . import decide
from .records import Report
from .summary import ok_trials


def noise_lines(report: Report, out: Path) -> list[str]:
    """The A/A's reading and what this machine can resolve, as lines; noise.json holds the same figures."""
    first, second = report.variants[:2]
    a, b = ok_trials(first.trials), ok_trials(second.trials)
    settings = report.settings
    rule = decide.Rule(settings.resolution or decide.RESOLUTION, tuple(settings.looks or ())) if settings else None
    said = decide.compare(b, a, rule or decide.DEFAULT_RULE)  # the report's own reading of the same trials
    if said.log_sd is None or said.ci is None:
        return ["A/A: too few successful trials to measure the noise (2 a side at least)."]
    per_trial = [t.process_s for t in a + b if t.process_s]
    round_s = 2 * statistics.median(per_trial) if per_trial else 0.0
    plans = decide.resolvable(said, round_s)
    verdict = said.verdict.value if said.verdict else "undecided" if said.undecided else "withheld"
    lines = [
        f"A/A: {said.ratio:.3f}x [{said.ci[0]:.3f}, {said.ci[1]:.3f}] ({verdict}; an A/A should never read "
        f"helped or hurt), {len(a)} and {len(b)} trials",
        f"noise between neighbouring trials: {said.log_sd:.1%} (sd of a round's log ratio); a trial takes "
        f"{round_s / 2:.1f} s",
    ]
    lines += [
        f"a verdict at +-{resolution:.0%} needs about {rounds} trials a variant: {_minutes(seconds)} for two variants"
        for resolution, rounds, seconds in plans
    ]
    data = {
        "ratio": said.ratio,
        "ci95": said.ci,
        "verdict": said.verdict,
        "log_sd": said.log_sd,
        "trial_s": round_s / 2,
        "needs": [{"resolution": r, "trials": n, "seconds": s} for r, n, s in plans],
    }
    write_atomic(Path(out) / "noise.json", strict_json(data, indent=2) + "\n")
    return lines


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
