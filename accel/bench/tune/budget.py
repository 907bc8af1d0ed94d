"""tune's wall-clock budget: which trials still fit, estimated from the trials that ran."""

from __future__ import annotations

import time

from ..records import Trial

OBJECTIVE = ""  # the trials of the objective itself (and of the final check); `--objective time` also runs "speed"


class Budget:
    """Wall-clock budget: trials run only when they fit in what is left beside the `reserve` trials kept back for
    the final check, each estimated at the mean duration seen so far of its kind (the time objective's speed-up
    stages run short throughput trials beside its runs to a target), or at its own variant's where measured; a
    kind with no trial yet at the mean of every trial. The reserve is estimated as the objective's trials. A kind
    given a share may spend only that share of the budget (the speed-up stages of `--objective time`, which come
    first, leave the rest to the runs to the target: a cold compile on a busy CPU once took a whole budget)."""

    def __init__(self, seconds: float | None, reserve: int = 0, shares: dict[str, float] | None = None):
        self.seconds, self.start, self.reserve = seconds, time.perf_counter(), reserve
        self.walls: dict[str, list[float]] = {}  # kind -> each trial's wall time
        self.shares = shares or {}

    def record(self, trials: list[Trial], kind: str = OBJECTIVE) -> None:
        """`trials` ran: each counted at its share of the clock, so a stage's rounds that several workers ran side
        by side (`--workers`, `--join`) spend the budget by the wall time they took, not by their sum."""
        at_once = side_by_side(trials)
        self.walls.setdefault(kind, []).extend(t.wall_s / at_once for t in trials if t.wall_s)

    def left_s(self) -> float | None:
        """Wall seconds left of the budget, the final check's reserve included (None without a budget)."""
        return None if self.seconds is None else max(self.seconds - (time.perf_counter() - self.start), 0.0)

    def allows(self, runs: int, kind: str = OBJECTIVE) -> bool:
        return self.fits([None] * runs, kind=kind)

    def stage_seconds(self, stages: int, kind: str = OBJECTIVE, done: list[Trial] = ()) -> float | None:
        """What is left for a stage beside `done` (its first rounds): an equal part, among the `stages` left (this
        one included), of what `kind` may still spend, each trial counted with its process's start-up as `fits`
        counts it; None without a budget (a stage then adds no rounds)."""
        if self.seconds is None:
            return None
        mine, every, spent, start_up = self._so_far(done)
        return max(self._limit(kind, mine, every, start_up) - spent, 0.0) / max(stages, 1)

    def fits(self, variants: list[str | None], done: list[Trial] = (), kind: str = OBJECTIVE) -> bool:
        """Whether trials of `variants` fit, a variant with trials in `done` (its stage's so far, of `kind`)
        estimated by them, any other at the mean trial of `kind`."""
        mine, every, spent, start_up = self._so_far(done)
        if self.seconds is None or not every or not variants:
            return True
        own: dict[str, list[float]] = {}
        for t in done:
            if t.wall_s:
                own.setdefault(t.variant, []).append(t.wall_s * start_up)
        walls = self.walls.get(kind, []) + mine or every
        typical = start_up * sum(walls) / len(walls)
        need = sum(sum(own[v]) / len(own[v]) if v in own else typical for v in variants)
        return spent + need <= self._limit(kind, mine, every, start_up)

    def _so_far(self, done: list[Trial]) -> tuple[list[float], list[float], float, float]:
        """`done`'s trial walls, every trial's so far with them, the wall time spent, and how much longer a trial
        takes than its own wall (trials run one after another; the elapsed time also holds each process's
        start-up)."""
        mine = [t.wall_s for t in done if t.wall_s]
        every = [w for walls in self.walls.values() for w in walls] + mine
        spent = max(time.perf_counter() - self.start, sum(every))
        return mine, every, spent, spent / sum(every) if sum(every) > 0 else 1.0

    def _limit(self, kind: str, mine: list[float], every: list[float], start_up: float) -> float:
        """What trials of `kind` may spend in all: its share of the budget (the rest, the reserve included, is the
        objective's), or the budget beside the reserve, each trial kept back at the objective's mean trial."""
        if kind in self.shares:
            return self.shares[kind] * self.seconds
        final = self.walls.get(OBJECTIVE, []) + (mine if kind == OBJECTIVE else []) or every
        return self.seconds - (self.reserve * start_up * sum(final) / len(final) if final else 0.0)


def side_by_side(trials: list[Trial]) -> float:
    """How many of `trials` ran at once, on average: their processes' seconds over the span from the first one's
    start to the last one's end (1 for trials run one after another, or without their clock times)."""
    timed = [(t.started_at, t.process_s) for t in trials if t.started_at is not None and t.process_s]
    if len(timed) < 2:
        return 1.0
    span = max(start + took for start, took in timed) - min(start for start, _ in timed)
    return max(1.0, sum(took for _, took in timed) / span) if span > 0 else 1.0


class WithinBudget:
    """A run_trials skip rule that ends a stage (skips every job left) once its remaining jobs no longer fit the
    budget: a candidate much slower to run than the trials before it, a compile's minutes, shows it in its first
    trial. Jobs are asked about in order, once each."""

    def __init__(self, budget: Budget | None, jobs: list[str], kind: str = OBJECTIVE):
        self.budget, self.jobs, self.asked, self.cut, self.kind = budget, jobs, 0, False, kind

    def __call__(self, variant: str, done: list[Trial]) -> str | None:
        left, self.asked = self.jobs[self.asked :], self.asked + 1
        if not self.cut and self.budget is not None and not self.budget.fits(left, done, self.kind):
            self.cut = True
        return "the stage's remaining trials would overrun the --budget" if self.cut else None
