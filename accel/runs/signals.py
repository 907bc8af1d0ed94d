"""SIGINT/SIGTERM/SIGHUP/SIGUSR1 as a request to stop cleanly, from the first byte a run writes to its last.

SIGHUP is what a closed terminal (an ssh session that drops) sends: its default action ended the run at once,
with no checkpoint or summary and a dead PID in the run directory's lock, so it is a stop like SIGTERM. Under
`nohup` it is ignored, and stays ignored (`handled`): there the run is meant to outlive its terminal.

The first signal asks the loop to finish its step; the run then checkpoints and writes its summary. A second is
acknowledged ("saving, please wait"), and a third raises ForcedStop at once, wherever the run is: checkpoint
files are written to a temporary file and renamed, so the previous checkpoint stays intact.

SIGUSR1 is preemption (SLURM's `--signal`, docs/devices.md): the run stops the same way, its summary says
"preempted" and `accel train` exits with PREEMPTED_EXIT, on which a job script requeues itself. A cluster may
deliver it to every process of a job, and more than once, so a repeated SIGUSR1 never counts towards the third.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("accel")
PREEMPT = signal.SIGUSR1
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, PREEMPT)
FORCE_AT = 3  # the signal that forces exit without waiting for the save
PREEMPTED_EXIT = 75  # EX_TEMPFAIL (sysexits.h): stopped to be run again later; distinct from Ctrl-C's 130
PR_SET_PDEATHSIG = 1  # prctl(2)
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None  # loaded before any fork


def handled(sigs: tuple[int, ...] = SIGNALS) -> tuple[int, ...]:
    """Those of `sigs` to handle now: all but an ignored SIGHUP (`nohup`), which must stay ignored."""
    return tuple(sig for sig in sigs if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN)


def leave_closed_terminal(signum: int) -> None:
    """After SIGHUP, point stdout and stderr at /dev/null if they were a terminal that is now closed (a hung-up
    terminal is a character device that no longer answers as a tty). Every later write there fails with EIO, and
    the run's next message or progress bar would end it with a traceback before its checkpoint and summary: this
    is what `nohup` would have done. A terminal still open (`kill -HUP` from another shell) is left as it is."""
    if signum != signal.SIGHUP:
        return
    for fd in (1, 2):
        try:
            closed = stat.S_ISCHR(os.fstat(fd).st_mode) and not os.isatty(fd)
        except OSError:  # no such descriptor
            continue
        if closed:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)


def die_with_parent() -> None:
    """A child's `preexec_fn`: the kernel SIGKILLs it when the process that started it dies (Linux; elsewhere
    nothing). A bench trial runs in a session of its own, out of reach of its terminal's signals: when its bench
    was killed with SIGKILL (which no handler sees), the trial trained on to its end under PID 1."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
        self.saves = True  # a checkpoint follows the stop (not in `accel profile`, which writes none)

    def handle(self, signum: int, _frame) -> None:
        leave_closed_terminal(signum)
        if signum == PREEMPT and self.preempted:
            log.info("received signal %d again: already stopping for preemption", signum)
            return
        self.preempted = self.preempted or signum == PREEMPT
        self.received += 1
        if self.received >= FORCE_AT:
            raise ForcedStop(signum)
        if self.received == 1 and not self.finishing:
            then = " and saving a checkpoint" if self.saves else ""
            log.warning("received signal %d: stopping after this step%s", signum, then)
        elif self.saves:
            log.warning(
                "received signal %d: saving, please wait (a third signal stops at once, without the "
                "final checkpoint; the previous one stays intact)",
                signum,
            )
        else:
            log.warning("received signal %d: finishing, please wait (a third signal stops at once)", signum)
        for listener in list(self.listeners):
            listener(signum)


_active: _Requests | None = None


@contextmanager
def stop_requests(on_signal: Callable[[int], None], saves: bool = True) -> Iterator[_Requests | None]:
    """Route SIGNALS (`handled`) to `on_signal(signum)` inside the block, and restore the old handlers after.
    `saves`: whether a checkpoint follows a stop, as the messages then promise.

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
    requests.saves = saves
    requests.listeners.append(on_signal)
    with handling(requests.handle) as installed:
        if not installed:
            yield None
            return
        _active = requests
        try:
            yield requests
        finally:
            _active = None


def finishing() -> None:
    """The loop has ended: from here on a signal is acknowledged while the final checkpoint and summary are
    written, instead of asking the loop to stop."""
    if _active is not None:
        _active.finishing = True


@contextmanager
def abort_on_signals() -> Iterator[None]:
    """Inside the block SIGNALS raise StartupInterrupted: for start-up, which writes nothing."""

    def handle(signum, _frame):
        leave_closed_terminal(signum)
        raise StartupInterrupted(signum)

    with handling(handle):
        yield


@contextmanager
def handling(handler: Callable[[int, Any], None]) -> Iterator[bool]:
    """`handler` for every signal accel handles (`handled()`) inside the block, and the handlers before put back
    after it; False, with nothing installed, outside the main thread, where signals stay with the caller."""
    try:
        previous = {sig: signal.signal(sig, handler) for sig in handled()}
    except ValueError:  # only the main thread may install a handler: the first call refuses
        yield False
        return
    try:
        yield True
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
