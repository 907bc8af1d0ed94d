"""`python -m accel.cli`: how torchrun starts each process of `accel train --nproc N`."""

import sys

from ..runs.process_exit import exit_without_teardown
from ..runs.signals import PREEMPTED_EXIT
from ..strategy.world import under_torchrun
from . import main

code = main()
# A rank that has saved and said everything skips the teardown, which could only crash it (process_exit.py). One
# that failed or refused exits as Python does: torchrun stops the others once one fails, and the teardown's second
# leaves rank 0 the time to release its run directory's lock (a rank 1 gone at once left rank 0's PID in it).
if under_torchrun() and code in (0, 130, PREEMPTED_EXIT):
    exit_without_teardown(code)
sys.exit(code)
