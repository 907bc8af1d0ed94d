"""Running torchrun (or a user's script in one process) from the parent: signals passed on to it once, its exit
code and the signal that stopped it handed back to the command that reports them."""

from __future__ import annotations

import logging
import os
import subprocess

from ..runs import signals

log = logging.getLogger("accel")


SAVE_GRACE_S = "300"  # how long torchrun lets the ranks save after a signal before it kills them (its default: 30)


RANKS = "torchrun and its ranks, which save a checkpoint"


def run_torchrun(command: list[str], env: dict[str, str] | None = None, to: str = RANKS) -> tuple[int, int | None]:
    """Run torchrun (or, `accel run` of one process, a user's script) and wait for it: (its exit code, the signal
    this process passed it, if any). `to`: who the first signal goes to, as the log says.

    torchrun starts in a session of its own, so a Ctrl-C or a closed terminal reaches it once, from here. The first
    SIGINT, SIGTERM, SIGHUP or SIGUSR1 is passed on (torchrun passes it to every rank, and rank 0 saves); a second is
    acknowledged; a third kills torchrun and the ranks at once (checkpoints are renamed into place, so the
    previous one stays intact). A repeated SIGUSR1 is not counted (accel/runs/signals.py). `env`: variables for
    torchrun and its ranks, over this process's."""
    env = {
        **os.environ,
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SAVE_GRACE_S),
        **(env or {}),
    }
    relay = _SignalRelay(to)
    with signals.handling(relay.handle):
        relay.process = subprocess.Popen(command, start_new_session=True, env=env)
        relay.pass_on()  # a signal that came while it was starting
        code = relay.process.wait()
    return code, relay.received[0] if relay.received else None


class _SignalRelay:
    """The signals received while torchrun runs: the first passed on, the second acknowledged, the third kills."""

    def __init__(self, to: str) -> None:
        self.to = to
        self.process: subprocess.Popen | None = None
        self.received: list[int] = []
        self.passed_on = False

    def handle(self, signum: int, _frame) -> None:
        signals.leave_closed_terminal(signum)
        if signum == signals.PREEMPT and signum in self.received:
            return
        self.received.append(signum)
        if len(self.received) == 1:
            log.warning("received signal %d: passing it to %s", signum, self.to)
            self.pass_on()
        elif len(self.received) == 2:
            log.warning(
                "received signal %d: saving, please wait (a third signal stops every process at once, "
                "without the final checkpoint; the previous one stays intact)",
                signum,
            )
        else:
            log.warning("received signal %d again: stopping torchrun and every rank now", signum)
            if self.process is not None:
                _kill_tree(self.process.pid)

    def pass_on(self) -> None:
        if self.process is not None and self.received and not self.passed_on:
            self.passed_on = True
            self.process.send_signal(self.received[0])


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
        tree = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:  # ended on its own meanwhile
            pass
