"""The step's anatomy as a table: wall time per phase per profiled step, its share of the step, and the memory
peak seen in it, from the flat segments accel/measure/anatomy.py recorded and the window's step boundaries."""

from __future__ import annotations

from typing import Any

from ..measure.anatomy import Segment

# in the loop's order; "profiler" is torch.profiler's own cost at each step's end, "other" the loop's own time
# between phases (the for statement, the budget check)
PHASES = (
    "data",
    "to_device",
    "forward",
    "loss",
    "backward",
    "optimizer",
    "speedups",
    "logging",
    "eval",
    "profiler",
    "other",
)


def anatomy(segments: list[Segment], boundaries: list[float], cuda: bool) -> dict[str, Any]:
    """Per phase: ms in each profiled step and their mean, share of the steps' time, peak MB (CUDA allocated, or
    the CPU resident set); and each step's wall time, from one boundary to the next."""
    windows = list(zip(boundaries, boundaries[1:]))
    spent = {phase: [0.0] * len(windows) for phase in PHASES}
    peak: dict[str, float] = {}
    for segment in segments:
        for i, (start, end) in enumerate(windows):
            overlap = min(segment.end, end) - max(segment.start, start)
            if overlap > 0:
                spent[segment.phase][i] += overlap * 1000
                if segment.peak_mb is not None:
                    peak[segment.phase] = max(peak.get(segment.phase, 0.0), segment.peak_mb)
    step_ms = [(end - start) * 1000 for start, end in windows]
    total = sum(step_ms) or 1e-9
    rows = [
        {
            "phase": phase,
            "ms_per_step": sum(ms) / len(ms),
            "share": sum(ms) / total,
            "peak_mb": peak.get(phase),
            "per_step_ms": ms,
        }
        for phase, ms in spent.items()
        if sum(ms) > 0 or phase == "other"
    ]
    return {"step_ms": step_ms, "phases": rows, "memory": "CUDA allocated" if cuda else "CPU resident set"}


def share(table: dict[str, Any], phase: str) -> float:
    return next((row["share"] for row in table["phases"] if row["phase"] == phase), 0.0)


def render(table: dict[str, Any]) -> str:
    steps = table["step_ms"]
    lines = [f"{'phase':<12} {'ms/step':>9} {'share':>7} {'peak MB':>9}"]
    for row in table["phases"]:
        peak = "" if row["peak_mb"] is None else f"{row['peak_mb']:.0f}"
        lines.append(f"{row['phase']:<12} {row['ms_per_step']:>9.1f} {row['share']:>7.1%} {peak:>9}")
    lines.append(f"{'step':<12} {sum(steps) / len(steps):>9.1f}   ({len(steps)} steps; peak: {table['memory']})")
    return "\n".join(lines)
