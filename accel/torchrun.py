"""`python -m accel.torchrun ARGS`: torchrun itself, without the tracebacks it ends with when a signal stops it or
the machines never meet.

torchrun passes SIGINT and SIGTERM to every rank, waits for them, then raises SignalException; by then rank 0
has said how the run ended, so this exits quietly with 128 + the signal's number instead. A rendezvous that
times out or cannot be reached is said in one paragraph, with exit code 2 as accel's other errors."""

import sys

from torch.distributed.elastic.multiprocessing import SignalException
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


if __name__ == "__main__":
    try:
        main()
    except SignalException as stop:
        sys.exit(128 + int(stop.sigval))
    except (RendezvousTimeoutError, RendezvousConnectionError) as err:
        print(rendezvous_message(sys.argv[1:], err), file=sys.stderr)
        sys.exit(2)
