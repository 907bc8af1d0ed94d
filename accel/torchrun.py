"""`python -m accel.torchrun ARGS`: torchrun itself, without the traceback it ends with when a signal stops it.

torchrun passes SIGINT and SIGTERM to every rank, waits for them, then raises SignalException; by then rank 0
has said how the run ended, so this exits quietly with 128 + the signal's number instead. SIGUSR1 (preemption,
accel/signals.py) is handled the same way: left to its default, it would end torchrun at once and orphan the
ranks (torchrun registers its handler for the signals in TORCHELASTIC_SIGNALS_TO_HANDLE, SIGUSR1 not among
them by default, and only once the ranks start), so the same handler is registered here, before anything else."""

import signal
import sys

from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler
from torch.distributed.run import main


def _preempted(signum, frame) -> None:
    # once: a second notice (a cluster may send one to every process, and `accel train` passes its own on) would
    # raise again inside torchrun's wait for the ranks to save, and end it before they have
    signal.signal(signum, signal.SIG_IGN)
    _terminate_process_handler(signum, frame)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _preempted)
    try:
        main()
    except SignalException as stop:
        sys.exit(128 + int(stop.sigval))
