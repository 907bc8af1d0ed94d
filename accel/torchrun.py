"""`python -m accel.torchrun ARGS`: torchrun itself, without the tracebacks it ends with when a signal stops it or
the machines never meet.

torchrun passes SIGINT and SIGTERM to every rank, waits for them, then raises SignalException; by then rank 0
has said how the run ended, so this exits quietly with 128 + the signal's number instead. SIGUSR1 (preemption,
accel/signals.py) is handled the same way: left to its default, it would end torchrun at once and orphan the
ranks (torchrun registers its handler for the signals in TORCHELASTIC_SIGNALS_TO_HANDLE, SIGUSR1 not among
them by default, and only once the ranks start), so the same handler is registered here, before anything else.
A rendezvous that times out or cannot be reached is said in one paragraph, with exit code 2 as accel's other
errors."""

import signal
import sys

from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError
from torch.distributed.run import main, parse_args


def rendezvous_message(argv: list[str], err: Exception) -> str:
    args = parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.rdzv_conf.split(",") if "=" in item)
    same = "the same --rdzv-endpoint, --rdzv-id and --nnodes"
    if isinstance(err, RendezvousTimeoutError):
        return (
            f"error: only some of the {args.nnodes} machines (--nnodes) joined the rendezvous at {args.rdzv_endpoint} "
            f"within {conf.get('join_timeout', '600')} s (--rdzv-timeout), so nothing was started. Start `accel "
            f"train` on every machine with {same}, check that each can reach {args.rdzv_endpoint}, or wait longer "
            "with --rdzv-timeout SECONDS."
        )
    return (
        f"error: could not reach the rendezvous at {args.rdzv_endpoint} ({err}). Check that the machine it names "
        f"runs `accel train` with {same} and that its port is open to this machine."
    )


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
    except (RendezvousTimeoutError, RendezvousConnectionError) as err:
        print(rendezvous_message(sys.argv[1:], err), file=sys.stderr)
        sys.exit(2)
