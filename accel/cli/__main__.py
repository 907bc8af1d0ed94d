"""`python -m accel.cli`: how torchrun starts each process of `accel train --nproc N`."""

import sys

from . import main

sys.exit(main())
