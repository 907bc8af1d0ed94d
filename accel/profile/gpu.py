"""The GPU's view of the profiled steps (CUDA): kernel time, memory copies, collectives, and how long the GPU sat
idle (the host-bound signal), from the trace's device events.

Holistic Trace Analysis computes the same breakdowns, but pulls pandas and plotly and reads the trace back from
disk; what the advice needs here is one union of intervals over the events the profiler already holds."""

from __future__ import annotations

import statistics
from typing import Any

from torch.autograd import DeviceType

from .window import Profiled

STEP = "ProfilerStep"  # torch names each step's range ProfilerStep#N (ProfilerStep* in its averages)


def gpu_view(profiled: Profiled) -> dict[str, Any] | None:
    """Per profiled step: kernel, memcpy and collective ms, the GPU-idle fraction of the steps' wall time,
    kernels launched and their median length. None on a host with no device events (CPU runs)."""
    if not profiled.cuda:
        return None
    events = profiled.profiler.events()
    steps = [e.time_range for e in events if e.name.startswith(STEP)]
    device = [e for e in events if e.device_type == DeviceType.CUDA]
    if not steps or not device:
        return None
    start, end = min(r.start for r in steps), max(r.end for r in steps)
    kinds: dict[str, float] = {"kernel": 0.0, "memcpy": 0.0, "collective": 0.0}
    for event in device:
        kinds[_kind(event.name)] += event.time_range.elapsed_us()
    kernels = [e.time_range.elapsed_us() for e in device if _kind(e.name) == "kernel"]
    n = profiled.steps
    return {
        **{f"{kind}_ms_per_step": us / n / 1000 for kind, us in kinds.items()},
        "idle_fraction": 1
        - busy_us([(e.time_range.start, e.time_range.end) for e in device], start, end) / max(end - start, 1),
        "kernels_per_step": len(kernels) / n,
        "median_kernel_us": statistics.median(kernels) if kernels else None,
    }


def busy_us(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """How much of [start, end] the intervals cover (overlapping streams counted once)."""
    covered, reach = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            covered += b - a
            reach = b
    return covered


def _kind(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith(("memcpy", "memset")):
        return "memcpy"
    return "collective" if "nccl" in lowered else "kernel"
