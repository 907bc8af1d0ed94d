"""`python -m accel.launch.torchrun ARGS`: torchrun itself, without the tracebacks it ends with when a signal stops it
or the machines never meet.

torchrun passes SIGINT and SIGTERM to every rank, waits for them, then raises SignalException; by then rank 0
has said how the run ended, so this exits quietly with 128 + the signal's number instead. SIGUSR1 (preemption,
accel/runs/signals.py) is handled the same way: left to its default, it would end torchrun at once and orphan the
ranks (torchrun registers its handler for the signals in TORCHELASTIC_SIGNALS_TO_HANDLE, SIGUSR1 not among
them by default, and only once the ranks start), so the same handler is registered here, before anything else.
A rendezvous that times out or cannot be reached is said in one paragraph, with exit code 2 as accel's other
errors. So is an error every rank refused the run with (a resume of another model): each rank leaves its
message in RANK_ERRORS (accel/errors.py), and this says each distinct one once, without torchrun's traceback."""

import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.api import _terminate_process_handler
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError
from torch.distributed.run import main, parse_args

from accel.errors import RANK_ERRORS

REFUSED = 2  # accel's exit code for an error in words (accel/cli)
# how a rank ends when torchrun stops it because another failed first: killed, or stopped by accel's handler
STOPPED = (-signal.SIGTERM, 128 + signal.SIGTERM, 130)


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


def said(folder: Path) -> list[str]:
    """The ranks' error messages, each distinct one once, in rank order."""
    messages = [p.read_text() for p in sorted(folder.glob("rank-*.txt"), key=lambda p: int(p.stem[5:]))]
    return list(dict.fromkeys(messages))


class _RefusedExit(logging.Filter):
    """Leaves out torchrun's line for ranks that exited with accel's refusal code: their message says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("failed (exitcode: %s)") and record.args and record.args[0] == REFUSED)


def _run() -> None:
    folder = Path(tempfile.mkdtemp(prefix="accel-rank-errors-"))
    os.environ[RANK_ERRORS] = str(folder)  # the ranks inherit it
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_RefusedExit())
    try:
        main()
    except ChildFailedError as failed:
        for message in said(folder):
            print(f"error: {message}", file=sys.stderr)
        codes = [f.exitcode for f in failed.failures.values()]
        if said(folder) and REFUSED in codes and all(code in (REFUSED, *STOPPED) for code in codes):
            sys.exit(REFUSED)
        raise  # a crash: torchrun's own account of it
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _preempted)
    try:
        _run()
    except SignalException as stop:
        sys.exit(128 + int(stop.sigval))
    except (RendezvousTimeoutError, RendezvousConnectionError) as err:
        print(rendezvous_message(sys.argv[1:], err), file=sys.stderr)
        sys.exit(REFUSED)
