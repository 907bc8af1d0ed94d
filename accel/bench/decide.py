"""The one rule by which a speed comparison is decided: bench, --ablate, tune, the --rev gate, --bisect, --history.

A comparison reads the variant's trials against the baseline's, each trial one process. Trials of one round (the
interleaved A B C ... of `variants.interleave`) ran next to each other and share the machine's state at that
moment, so the comparison is **paired**: the log of each round's throughput ratio, whose mean and Student-t
interval give the ratio and its interval (unpaired, Welch's, where rounds are missing on a side). Logs because
timing noise multiplies (a slower core slows every step by the same share) and a ratio's interval is then
symmetric in log space.

Each trial's throughput is its samples/s with its slowest steps capped (`trial_rate`): a preemption spike on a
shared machine costs one step what a neighbour took, which the mean would carry into the comparison; a variant
whose every step is slow is untouched (it is the bulk that is capped against, not a fixed figure).

**Resolution.** A verdict answers "by more than the resolution asked (`--resolution`, 3% by default)?":
- helped (hurt): the interval lies above (below) 1 and the estimate moved at least half the resolution;
- no effect: the whole interval lies within +-resolution: no change that large is there;
- undecided: the interval still reaches past the resolution on one side and 1 on the other: more trials, or a
  quieter machine, would tell; never read as "no effect".
A busy machine (accel/measure/load.py) withholds the verdict whatever the interval says.

**Adding trials until it decides.** A bench may look again after more rounds (`Plan`): the pilot's rounds, then
rounds added in groups until every comparison decides or the budget ends. Looking repeatedly at a 95% interval
and stopping when it excludes 1 would call an A/A "helped" far more often than 5 times in 100, so every look uses
a repeated confidence interval (Jennison and Turnbull): the Pocock constant for the planned looks, found by
simulating the looks' own sample sizes, makes the chance that *any* look's interval misses the truth 5%. The
interval at whichever look the bench stops is therefore a 95% interval, as its label says (simulated over
normal, heavy-tailed, drifting and bimodal noise: tests/bench/test_decide.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from .records import Trial, Verdict

LEVEL = 0.95  # every interval's coverage: the report's `ci95`
RESOLUTION = 0.03  # the change a verdict resolves by default: 3% of throughput
MIN_PAIRS = 2  # one round gives no spread, so no interval


@dataclass(frozen=True)
class Rule:
    """How a comparison is decided: the resolution asked, and the looks the bench plans (`looks`: the number of
    rounds at each look; one look for a fixed design)."""

    resolution: float = RESOLUTION
    looks: tuple[int, ...] = ()

    @property
    def per_look_level(self) -> float:
        """The two-sided level of each look's interval that keeps the whole sequence's coverage at LEVEL."""
        return pocock_level(self.looks) if len(self.looks) > 1 else LEVEL


DEFAULT_RULE = Rule()


@dataclass(frozen=True)
class Decision:
    """A comparison read: the ratio (variant over baseline) and its interval, the verdict (None: withheld or too
    few trials), and whether it is undecided at the rule's resolution; `pairs` rounds were read (0: unpaired)."""

    ratio: float | None
    ci: tuple[float, float] | None
    verdict: Verdict | None
    undecided: bool = False
    pairs: int = 0
    log_sd: float | None = None  # the spread of one round's log ratio (unpaired: of one trial's log, pooled)

    def rounds_to_decide(self, rule: Rule) -> int | None:
        """About how many rounds a fixed design would need for its interval to be narrow enough to decide at the
        rule's resolution (half-width half the resolution); None when the spread is not known."""
        if self.log_sd is None:
            return None
        half = math.log1p(rule.resolution) / 2
        z = sps.norm.ppf(0.5 + LEVEL / 2)
        return max(MIN_PAIRS + 1, math.ceil((z * self.log_sd / half) ** 2) + 1)


STALLS = 0.02  # at most this share of a trial's steps (and at least one) may be capped as a neighbour's stalls


def trial_rate(trial: Trial) -> float | None:
    """The trial's samples/s with a rare stalled step capped at Q3 + 3 IQR of its own steps: a step stalled by
    another process does not count at its stalled length. A cost that comes back (a loader falling behind every
    8th step, a host sync every 10th) is the variant's own, and stays: beyond STALLS nothing is capped; nor are
    steps all slow alike, which the quartiles follow."""
    sps_ = trial.samples_per_s
    times = np.asarray(trial.step_times_s or [], dtype=float)
    if sps_ is None or sps_ <= 0 or times.size < 4 or times.sum() <= 0:
        return sps_
    q1, q3 = np.percentile(times, [25, 75])
    fence = q3 + 3 * (q3 - q1)
    if (times > fence).sum() > max(1, int(STALLS * times.size)):
        return sps_
    return float(sps_ * times.sum() / np.minimum(times, fence).sum())


def _rates(trials: Sequence[Trial]) -> dict[int, float]:
    out = {}
    for i, t in enumerate(trials):
        rate = trial_rate(t)
        if rate is not None and rate > 0:
            out[t.trial if t.trial is not None else i] = rate
    return out


def compare(
    trials: Sequence[Trial], base_trials: Sequence[Trial], rule: Rule = DEFAULT_RULE, busy: bool = False
) -> Decision:
    """The variant's successful trials against the baseline's under `rule`; `busy` withholds the verdict."""
    v, b = _rates(trials), _rates(base_trials)
    return compare_rates(v, b, rule, busy)


def compare_rates(v: dict[int, float], b: dict[int, float], rule: Rule = DEFAULT_RULE, busy: bool = False) -> Decision:
    """`v` and `b` map a round to a trial's throughput; rounds on both sides are paired."""
    if not v or not b:
        return Decision(None, None, None)
    rounds = sorted(set(v) & set(b))
    # the smaller side's rounds: a baseline that ran more rounds (for another comparison) still pairs
    paired = len(rounds) >= MIN_PAIRS and len(rounds) >= 0.8 * min(len(v), len(b))
    if paired:
        d = np.log([v[r] for r in rounds]) - np.log([b[r] for r in rounds])
        mean, sd, n, df = float(d.mean()), float(d.std(ddof=1)), d.size, d.size - 1
        se = sd / math.sqrt(n)
    else:
        lv, lb = np.log(list(v.values())), np.log(list(b.values()))
        mean = float(lv.mean() - lb.mean())
        if min(lv.size, lb.size) < MIN_PAIRS:
            return Decision(math.exp(mean), None, None, pairs=0)
        se, df, sd = _welch(lv, lb)
        n = 0
    half = _t(rule.per_look_level, df) * se if se > 0 else 0.0
    ci = (math.exp(mean - half), math.exp(mean + half))
    verdict, undecided = (None, False) if busy else judge(mean, mean - half, mean + half, rule.resolution)
    return Decision(math.exp(mean), ci, verdict, undecided, n if paired else 0, sd)


@lru_cache(maxsize=1024)
def _t(level: float, df: float) -> float:
    """Student's t quantile of a two-sided `level` interval."""
    return float(sps.t.ppf(0.5 + level / 2, df))


def _welch(lv: np.ndarray, lb: np.ndarray) -> tuple[float, float, float]:
    """Welch's standard error and degrees of freedom of a difference of means, and the pooled spread."""
    av, ab = lv.var(ddof=1) / lv.size, lb.var(ddof=1) / lb.size
    se = math.sqrt(av + ab)
    if se == 0:
        return 0.0, 1.0, 0.0
    df = (av + ab) ** 2 / (av**2 / (lv.size - 1) + ab**2 / (lb.size - 1))
    pooled = math.sqrt(lv.var(ddof=1) + lb.var(ddof=1))  # one trial a side: the spread of one round's log ratio
    return se, df, pooled


def judge(mean: float, lo: float, hi: float, resolution: float) -> tuple[Verdict | None, bool]:
    """(verdict, undecided) from a log ratio and its interval at `resolution` (the module's rule)."""
    r = math.log1p(resolution)
    if lo > 0 and mean >= r / 2:
        return Verdict.HELPED, False
    if hi < 0 and mean <= -r / 2:
        return Verdict.HURT, False
    if lo >= -r and hi <= r:
        return Verdict.NO_EFFECT, False
    return None, True


# The looks of a sequential bench: after the pilot, each look adds about half the rounds run so far, so the
# number of looks grows with the log of the rounds (each look's interval widens with the number of looks).
GROWTH = 1.5


def look_schedule(pilot: int, most: int) -> tuple[int, ...]:
    """The rounds after which a bench of `pilot` rounds, at most `most`, looks at its comparisons."""
    looks = [max(pilot, MIN_PAIRS)]
    while looks[-1] < most:
        looks.append(min(most, max(looks[-1] + 1, math.ceil(looks[-1] * GROWTH))))
    return tuple(looks)


@lru_cache(maxsize=64)
def pocock_level(looks: tuple[int, ...], alpha: float = 1 - LEVEL, draws: int = 40_000) -> float:
    """Each look's two-sided level so that the intervals at all `looks` (cumulative rounds) cover the truth
    together with probability 1 - alpha: Pocock's constant for these information fractions, by simulating the
    standardised cumulative means at the looks (seeded, so a report never changes). Student-t quantiles at this
    level stand in for the normal's at small counts."""
    rng = np.random.default_rng(0)
    sizes = np.diff((0, *looks))
    steps = rng.standard_normal((draws, len(sizes))) * np.sqrt(sizes)
    z = np.abs(np.cumsum(steps, axis=1) / np.sqrt(looks)).max(axis=1)
    c = float(np.quantile(z, 1 - alpha))
    return float(1 - 2 * sps.norm.sf(c))


def spread_interval(xs: Sequence[float], level: float = LEVEL) -> tuple[float, float] | None:
    """A `level` interval of the trials' typical throughput (their geometric mean, Student-t in log space); one
    trial, or a figure of zero, has none."""
    logs = np.log([x for x in xs if x > 0])
    if logs.size < MIN_PAIRS or logs.size < len(xs):
        return (float(min(xs)), float(max(xs))) if len(xs) == 1 else None
    half = _t(level, logs.size - 1) * logs.std(ddof=1) / math.sqrt(logs.size)
    return math.exp(logs.mean() - half), math.exp(logs.mean() + half)


@dataclass(frozen=True)
class Rounds:
    """How many rounds a bench runs: `pilot` first; then, unless `fixed`, rounds added at the looks of
    `look_schedule` while a comparison is undecided, up to `most` rounds and while the bench's wall time is under
    `budget_s` (the pilot's included)."""

    pilot: int
    most: int
    budget_s: float
    resolution: float = RESOLUTION
    gate: float | None = None  # --fail-if-slower's share: a reading across its line is undecided for the gate too

    @property
    def fixed(self) -> bool:
        return self.most <= self.pilot

    def looks(self, elapsed_s: float) -> tuple[int, ...]:
        """The looks, planned once from the pilot's own duration (never from what it measured, so the plan cannot
        chase a lucky reading): as many rounds as the budget left allows at the pilot's pace."""
        if self.fixed:
            return (self.pilot,)
        per_round = elapsed_s / self.pilot
        affordable = self.pilot + int(max(self.budget_s - elapsed_s, 0) / per_round) if per_round > 0 else self.most
        return look_schedule(self.pilot, max(self.pilot, min(self.most, affordable)))

    def rule(self, looks: tuple[int, ...] = ()) -> Rule:
        return Rule(self.resolution, looks)


def fixed_rounds(trials: int, resolution: float = RESOLUTION) -> Rounds:
    """`--trials N` as given: N rounds, one look."""
    return Rounds(trials, trials, 0.0, resolution)


AA_RESOLUTIONS = (0.03, 0.05, 0.10)


def resolvable(decision: Decision, round_s: float) -> list[tuple[float, int, float]]:
    """From an A/A comparison: for each resolution in AA_RESOLUTIONS, about how many trials a variant a fixed
    design needs to decide it on this noise, and the seconds that many rounds of two variants take at `round_s`
    a round."""
    out = []
    for resolution in AA_RESOLUTIONS:
        rounds = decision.rounds_to_decide(Rule(resolution))
        if rounds is not None:
            out.append((resolution, rounds, rounds * round_s))
    return out
