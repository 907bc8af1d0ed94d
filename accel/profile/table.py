"""The ops by self time per step (on a GPU, the device's time first, then the host's: where the CPU blocks on
syncs, pinned allocations, launches), the same time grouped by the module or phase that called each op, and the
share of it in matmul/convolution/attention (what MFU counts)."""

from __future__ import annotations

import re
from typing import Any

from torch.autograd import DeviceType

from ..measure.anatomy import MODULE, PREFIX
from .gpu import STEP
from .window import Profiled


def op_rows(profiled: Profiled, rows: int) -> dict[str, list[dict[str, Any]]]:
    """Per clock (`self_device_time`, `self_cpu_time`), the `rows` ops that took most of it, then the total
    (op `total`): milliseconds per profiled step and share of the clock's total."""
    clocks = ["self_device_time_total", "self_cpu_time_total"][0 if profiled.cuda else 1 :]
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


# the ops that MFU counts: matrix multiplies, convolutions and attention (fused or not), forward and backward
MATMUL = re.compile(r"mm|conv|scaled_dot_product|flash|gemm|linear", re.IGNORECASE)


def matmul_share(profiled: Profiled) -> float:
    """The share of self time (the device's on CUDA, else the host's) in matmul/convolution/attention ops."""
    clock = _clock(profiled)
    events = [event for event in profiled.profiler.key_averages() if event.key.startswith("aten::")]
    total = sum(getattr(event, clock) for event in events) or 1.0
    return sum(getattr(event, clock) for event in events if MATMUL.search(event.key)) / total


def by_module(profiled: Profiled, rows: int, ops: int = 3) -> list[dict[str, Any]]:
    """Self time grouped by what called the op: the model's top-level child for its forward (the anatomy's
    module ranges), else the phase (backward, optimizer, ...); per group its ms per step, share and top `ops`."""
    clock = _clock(profiled)
    groups: dict[str, dict[str, float]] = {}
    for event in profiled.profiler.events():
        spent = getattr(event, clock)
        if event.device_type != DeviceType.CPU or spent <= 0 or event.name.startswith((PREFIX, STEP)):
            continue
        per_op = groups.setdefault(_caller(event), {})
        per_op[event.name] = per_op.get(event.name, 0.0) + spent
    total = sum(sum(per_op.values()) for per_op in groups.values()) or 1.0
    ranked = sorted(groups.items(), key=lambda item: sum(item[1].values()), reverse=True)[:rows]
    return [
        {
            **_row(group, sum(per_op.values()), total, profiled.steps),
            "top": [name for name, _ in sorted(per_op.items(), key=lambda kv: kv[1], reverse=True)[:ops]],
        }
        for group, per_op in ranked
    ]


def _caller(event) -> str:
    """The innermost of the loop's ranges around `event`: a module's name, or `(phase)`."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(MODULE):
            return parent.name.removeprefix(MODULE)
        if parent.name.startswith(PREFIX):
            return f"({parent.name.removeprefix(PREFIX)})"
        parent = parent.cpu_parent
    return "(outside the phases)"


def _clock(profiled: Profiled) -> str:
    return "self_device_time_total" if profiled.cuda else "self_cpu_time_total"
