"""tune's wall-clock budget: which trials still fit, estimated from the trials that ran."""

from __future__ import annotations

import time

from ..records import Trial


class Budget:
    """Wall-clock budget: trials run only when they fit in what is left beside the `reserve` trials kept back for
    the final check, each estimated at the mean duration seen so far, or at its own variant's where measured."""

    def __init__(self, seconds: float | None, reserve: int = 0):
        self.seconds, self.start, self.walls, self.reserve = seconds, time.perf_counter(), [], reserve

    def record(self, trials: list[Trial]) -> None:
        self.walls += [t.wall_s for t in trials if t.wall_s]

    def allows(self, runs: int) -> bool:
        return self.fits([None] * runs)

    def fits(self, variants: list[str | None], done: list[Trial] = ()) -> bool:
        """Whether trials of `variants` fit, a variant with trials in `done` (its stage's so far) estimated by
        them, any other at the mean trial."""
        walls = self.walls + [t.wall_s for t in done if t.wall_s]
        if self.seconds is None or not walls or not variants:
            return True
        # Trials run one after another; the elapsed time also holds each trial process's start-up.
        spent = max(time.perf_counter() - self.start, sum(walls))
        start_up = spent / sum(walls)
        own: dict[str, list[float]] = {}
        for t in done:
            if t.wall_s:
                own.setdefault(t.variant, []).append(t.wall_s * start_up)
        mean = spent / len(walls)
        need = sum(sum(own[v]) / len(own[v]) if v in own else mean for v in variants)
        return spent + need + self.reserve * mean <= self.seconds


class WithinBudget:
    """A run_trials skip rule that ends a stage (skips every job left) once its remaining jobs no longer fit the
    budget: a candidate much slower to run than the trials before it, a compile's minutes, shows it in its first
    trial. Jobs are asked about in order, once each."""

    def __init__(self, budget: Budget | None, jobs: list[str]):
        self.budget, self.jobs, self.asked, self.cut = budget, jobs, 0, False

    def __call__(self, variant: str, done: list[Trial]) -> str | None:
        left, self.asked = self.jobs[self.asked :], self.asked + 1
        if not self.cut and self.budget is not None and not self.budget.fits(left, done):
            self.cut = True
        return "the stage's remaining trials would overrun the --budget" if self.cut else None
