"""How busy the machine was while something ran: whether a measurement taken then can be trusted.

Other processes' CPU time is the busy time of the cores this process may use (/proc/stat's per-CPU counters,
through psutil) less what this process's group used (each member's own and reaped children's time): a bench trial
runs in a group of its own, its DataLoader workers and a launcher's ranks in it, so the trial's whole tree is left
out, alive or ended. The hypervisor's steal on those cores counts as taken by others too. A trial measures its
timed steps only (`Window`): `busy()` is the one rule; the bench, tune and the profile report say the same thing
through `busy_note()`, and `accel train` of its whole fit through `busy_run_note()`. GPU use by other processes is
not recorded: NVML is not a dependency, and inside a container its process ids are the host's, so "other" could
not be told from "ours".
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil

from ..devices import usable_cpu_ids

BUSY_SHARE = 0.2  # others took a fifth of the cores a measurement may use: its timings swing, its intervals widen
# /proc/stat counts CPU time in 10 ms ticks: over less core time than this (0.5 s on 2 cores), others' share of a
# window (a trial's few short timed steps) is mostly rounding, and is not judged
MEASURABLE_CORE_S = 1.0


@dataclass(frozen=True)
class Counters:
    """CPU seconds at one moment: busy and stolen on the usable cores, and this process tree's own."""

    wall_s: float
    busy_s: float
    steal_s: float
    own_s: float
    cores: int


def counters() -> Counters:
    ids = usable_cpu_ids()
    per_cpu = psutil.cpu_times(percpu=True)
    mine = [per_cpu[i] for i in ids if i < len(per_cpu)] or per_cpu
    return Counters(
        wall_s=time.perf_counter(),
        busy_s=sum(c.user + c.nice + c.system + c.irq + c.softirq for c in mine),
        steal_s=sum(getattr(c, "steal", 0.0) for c in mine),
        own_s=_group_cpu_s(),
        cores=len(mine),
    )


def _group_cpu_s() -> float:
    """CPU seconds of this process group: its live members' and what they reaped. getrusage alone misses live
    children (a trial's DataLoader workers while it steps), which then read as others' load."""
    group, total = os.getpgrp(), 0.0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != group:
                continue
            t = proc.cpu_times()
        except (OSError, psutil.Error):  # ended meanwhile
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def between(start: Counters, end: Counters) -> dict[str, Any]:
    """The load record of the time from `start` to `end` (a bench trial's `load`)."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    own = end.own_s - start.own_s
    others = max(end.busy_s - start.busy_s - own, 0.0)  # tick-sampled busy time can trail the exact own time
    steal = max(end.steal_s - start.steal_s, 0.0)
    return {
        "wall_s": wall,
        "cores": end.cores,
        "own_cpu_s": own,
        "others_cpu_s": others,
        "steal_s": steal,
        "others_share": (others + steal) / (wall * end.cores),
        "load_avg_1m": os.getloadavg()[0],
    }


@contextmanager
def watched() -> Iterator[dict[str, Any]]:
    """The machine's load while the body runs, in the yielded dict once it ends (empty if it raised)."""
    start, record = counters(), {}
    yield record
    record.update(between(start, counters()))


class Window:
    """The load over a trial's timed steps, from the end of its warm-up (`begin`) to its last timed step (`end`):
    a neighbour that ran only while the trial started up or compiled did not touch its timings, and one that came
    during them did, however short the steps were beside the rest of the process."""

    def __init__(self) -> None:
        self._start: Counters | None = None
        self.load: dict[str, Any] | None = None

    def begin(self) -> None:
        self._start, self.load = counters(), None

    def end(self) -> dict[str, Any] | None:
        """Close the window now, unless it is closed already; its load (None when it never began)."""
        if self._start is not None and self.load is None:
            self.load = between(self._start, counters())
        return self.load


def busy(load: dict[str, Any] | None) -> bool:
    """Whether other processes (and steal) took at least BUSY_SHARE of the cores the measurement may use, over a
    window long enough to tell."""
    if not load or load["wall_s"] * load["cores"] < MEASURABLE_CORE_S:
        return False
    return load["others_share"] >= BUSY_SHARE


def busy_note(loads: list[dict[str, Any] | None], what: str = "trials") -> str | None:
    """A warning for the top of a report when the machine was busy during any of `loads`; None when quiet."""
    seen = [load for load in loads if load]
    hit = [load for load in seen if busy(load)]
    if not hit:
        return None
    worst = max(hit, key=lambda load: load["others_share"])
    return (
        f"The machine was busy during {len(hit)} of {len(seen)} {what}: other processes took up to "
        f"{worst['others_share']:.0%} of the {worst['cores']} core(s) they may use (load average "
        f"{worst['load_avg_1m']:.1f}), so timings swing and intervals widen. Stop the other work and run again: "
        "more trials would not help, as a comparison with a busy trial on either side gets no verdict."
    )


def busy_run_note(load: dict[str, Any] | None) -> str | None:
    """A warning for one training run's own figures (samples/s, step and epoch times) when the machine was busy while
    it trained; None when quiet."""
    if not busy(load):
        return None
    return (
        f"the machine was busy while this run trained: other processes took {load['others_share']:.0%} of the "
        f"{load['cores']} core(s) it may use (load average {load['load_avg_1m']:.1f}), so its times and samples/s "
        "are slower than this machine's own; stop the other work before comparing them."
    )
