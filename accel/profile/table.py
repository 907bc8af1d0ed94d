"""The ops by self time per step: on a GPU, the device's time first, then the host's (where the CPU blocks:
syncs, pinned allocations, launches)."""

from __future__ import annotations

from typing import Any

from .steps import Profiled


def op_rows(profiled: Profiled, rows: int) -> dict[str, list[dict[str, Any]]]:
    """Per clock (`self_device_time`, `self_cpu_time`), the `rows` ops that took most of it, then the total
    (op `total`): milliseconds per profiled step and share of the clock's total."""
    clocks = ["self_device_time_total", "self_cpu_time_total"][0 if profiled.device else 1 :]
    events = profiled.profiler.key_averages()
    tables = {}
    for clock in clocks:
        total_us = sum(getattr(event, clock) for event in events) or 1.0
        ranked = sorted(events, key=lambda event: getattr(event, clock), reverse=True)[:rows]
        table = [_row(event.key, getattr(event, clock), total_us, profiled.steps) for event in ranked]
        tables[clock.removesuffix("_total")] = [*table, _row("total", total_us, total_us, profiled.steps)]
    return tables


def _row(op: str, spent_us: float, total_us: float, steps: int) -> dict[str, Any]:
    return {"op": op, "ms_per_step": spent_us / steps / 1000, "share": spent_us / total_us}


def render(tables: dict[str, list[dict[str, Any]]]) -> str:
    blocks = []
    for clock, rows in tables.items():
        lines = [f"{'op':<48} {'ms/step':>9} {'share':>7}"]
        lines += [f"{row['op'][:48]:<48} {row['ms_per_step']:>9.1f} {row['share']:>7.1%}" for row in rows[:-1]]
        lines.append(f"{'total (' + clock + ')':<48} {rows[-1]['ms_per_step']:>9.1f}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
