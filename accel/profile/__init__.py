"""`accel profile` and `accel train --profile`: where a training step's time and memory go, and what to do.

`window.py` profiles a window of steps of accel's own loop (accel/measure/anatomy.py times its phases); `phases.py` is
the
step's anatomy, `table.py` the operators by self time and by module, `gpu.py` the GPU's view (CUDA), `advice.py`
the findings and their fixes, `report.py` profile.json/.md/.html, `trace.py` the Chrome trace (open it in
https://ui.perfetto.dev or chrome://tracing)."""

from .steps import profile_recipe, profile_window, step_overrides
from .window import Profiled, ProfileWindow

__all__ = ["ProfileWindow", "Profiled", "profile_recipe", "profile_window", "step_overrides"]
