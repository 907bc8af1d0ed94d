"""`python -m accel.cli`: how torchrun starts each process of `accel train --nproc N`."""

import sys

from ..runs.process_exit import exit_without_teardown
from ..strategy.world import under_torchrun
from . import main

code = main()
if under_torchrun():  # a rank has saved and said everything: its teardown could only crash it (process_exit.py)
    exit_without_teardown(code)
sys.exit(code)
