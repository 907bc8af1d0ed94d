"""`python -m accel.torchrun ARGS`: torchrun itself, without the traceback it ends with when a signal stops it.

torchrun passes SIGINT and SIGTERM to every rank, waits for them, then raises SignalException; by then rank 0
has said how the run ended, so this exits quietly with 128 + the signal's number instead."""

import sys

from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.run import main

if __name__ == "__main__":
    try:
        main()
    except SignalException as stop:
        sys.exit(128 + int(stop.sigval))
