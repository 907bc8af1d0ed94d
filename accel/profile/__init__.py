"""`accel profile`: where a recipe's training step goes, from torch.profiler over a few steps of accel's own loop.

`steps.py` profiles the steps, `table.py` ranks the ops by self time per step, `trace.py` writes the Chrome
trace (open it in https://ui.perfetto.dev or chrome://tracing)."""

from .steps import Profiled, profile_recipe
from .table import op_rows, render
from .trace import write_trace

__all__ = ["Profiled", "op_rows", "profile_recipe", "render", "write_trace"]
