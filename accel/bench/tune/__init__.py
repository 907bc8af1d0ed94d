"""`accel tune`: choose speed-ups and the cheap knobs (batch size, workers, threads) by measurement; write YAML.

One knob at a time, in order, each starting from the best values found so far (coordinate descent, one pass;
accel/bench/knobs.py says which knobs, which candidates, and why in that order). That order is how the search
handles interactions: each knob is judged in the configuration the earlier ones chose (layout and kernels in the
chosen dtype, compile over all of them, batch size with compile on, workers and threads with the final compute),
at the cost of not revisiting an earlier knob. Every candidate runs through the bench's trial runner: fresh
processes, interleaved trials, warm-up excluded, the reference measured again in every stage. A candidate
replaces the reference (the recipe's value; off for a speed-up, since the simpler setting should win a tie) only
when its throughput ratio's interval says "helped", by mean samples/s and by the median step's both (a stall of a
shared machine moves the one, a cost hitting only some steps hides from the other), over at least two trials,
none of which failed, when (a speed-up) its training loss stayed within noise of the reference's (trials evaluate
nothing: speed and that loss are all tune compares), and when its start-up cost (compilation) is repaid within
the recipe's planned steps. Batch sizes are tried in ascending order and the first one that fails (out of memory,
or no full batch left) bounds the search. A budget skips the knobs whose trials would not fit, and ends a stage
whose remaining trials no longer fit once its first trials show them slower than estimated (compile's minutes).

With `--objective time` (`objective`) the speed-ups come first, chosen as above and then run together to the
target (`levers`), and on top of them the knobs that change learning, ranked by the wall time until a validation
target rather than by samples/s; its learning-rate candidate comes from a range test (`lr_range`). docs/bench.md
says how each is run and chosen.

The modules: `search` (the stages and the choice), `objective` (what a stage's winner must improve), `levers`
(the time objective's speed-ups and what each lever bought), `lr_range`, `budget`, `configs` (which overrides
make the same configuration), `rows` (the result rows), `output` (the table and the fragment), `page` (tune.html:
the search's history and each knob's importance), `study` and `workers` (the learning stages on an Optuna study,
shared by workers) and `script` (an unchanged script as the subject).
"""

from __future__ import annotations

from ..knobs import BATCH_KEY, WORKERS_KEY, Knob, build_knobs, time_knobs
from . import levers
from .objective import Objective, time_settings
from .output import NOTHING_MEASURED, check_fragment_out, final_lines, table, write_fragment
from .page import write_page
from .search import TrialRunner, TuneResult, tune

__all__ = [
    "BATCH_KEY",
    "NOTHING_MEASURED",
    "Objective",
    "WORKERS_KEY",
    "Knob",
    "TrialRunner",
    "TuneResult",
    "build_knobs",
    "levers",
    "check_fragment_out",
    "final_lines",
    "table",
    "time_knobs",
    "time_settings",
    "tune",
    "write_fragment",
    "write_page",
]
