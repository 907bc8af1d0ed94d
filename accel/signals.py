"""SIGINT/SIGTERM/SIGUSR1 as a request to stop cleanly, from the first byte a run writes to its last.

The first signal asks the loop to finish its step; the run then checkpoints and writes its summary. A second is
acknowledged ("saving, please wait"), and a third raises ForcedStop at once, wherever the run is: checkpoint
files are written to a temporary file and renamed, so the previous checkpoint stays intact.

SIGUSR1 is preemption (SLURM's `--signal`, docs/devices.md): the run stops the same way, its summary says
"preempted" and `accel train` exits with PREEMPTED_EXIT, on which a job script requeues itself. A cluster may
deliver it to every process of a job, and more than once, so a repeated SIGUSR1 never counts towards the third.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("accel")
PREEMPT = signal.SIGUSR1
SIGNALS = (signal.SIGINT, signal.SIGTERM, PREEMPT)
FORCE_AT = 3  # the signal that forces exit without waiting for the save
PREEMPTED_EXIT = 75  # EX_TEMPFAIL (sysexits.h): stopped to be run again later; distinct from Ctrl-C's 130


def stop_status(signum: int | None) -> str:
    """The summary's status of a run that a signal stopped."""
    return "preempted" if signum == PREEMPT else "interrupted"


class Interrupted(KeyboardInterrupt):
    """A signal that stopped the run where it was, as Ctrl-C does in any Python program."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class StartupInterrupted(Interrupted):
    """A signal before the run wrote anything: start-up stops at once, and the directory is as it was."""


class ForcedStop(Interrupted):
    """The third signal: the run stops without its final checkpoint and summary."""


class _Requests:
    """The signals received so far and who to tell; one per process, however many blocks are nested."""

    def __init__(self) -> None:
        self.received = 0
        self.listeners: list[Callable[[int], None]] = []
        self.finishing = False  # the loop is over: what is left is saving
        self.preempted = False

    def handle(self, signum: int, _frame) -> None:
        if signum == PREEMPT and self.preempted:
            log.info("received signal %d again: already stopping for preemption", signum)
            return
        self.preempted = self.preempted or signum == PREEMPT
        self.received += 1
        if self.received >= FORCE_AT:
            raise ForcedStop(signum)
        if self.received == 1 and not self.finishing:
            log.warning("received signal %d: stopping after this step and saving a checkpoint", signum)
        else:
            log.warning(
                "received signal %d: saving, please wait (a third signal stops at once, without the "
                "final checkpoint; the previous one stays intact)",
                signum,
            )
        for listener in list(self.listeners):
            listener(signum)


_active: _Requests | None = None


@contextmanager
def stop_requests(on_signal: Callable[[int], None]) -> Iterator[_Requests | None]:
    """Route SIGINT, SIGTERM and SIGUSR1 to `on_signal(signum)` inside the block, and restore the old handlers after.

    Blocks nest: an inner block shares the outer one's count of signals, so a run that began handling them
    before its trainer's loop started (`accel train`) still counts to three across both."""
    global _active
    if _active is not None:
        _active.listeners.append(on_signal)
        try:
            yield _active
        finally:
            _active.listeners.remove(on_signal)
        return
    requests = _Requests()
    requests.listeners.append(on_signal)
    try:
        previous = {sig: signal.signal(sig, requests.handle) for sig in SIGNALS}
    except ValueError:  # not the main thread: signals stay with the caller
        yield None
        return
    _active = requests
    try:
        yield requests
    finally:
        _active = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def finishing() -> None:
    """The loop has ended: from here on a signal is acknowledged while the final checkpoint and summary are
    written, instead of asking the loop to stop."""
    if _active is not None:
        _active.finishing = True


@contextmanager
def abort_on_signals() -> Iterator[None]:
    """Inside the block SIGINT, SIGTERM and SIGUSR1 raise StartupInterrupted: for start-up, which writes nothing."""

    def handle(signum, _frame):
        raise StartupInterrupted(signum)

    try:
        previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    except ValueError:
        previous = {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
