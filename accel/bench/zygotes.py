"""A script's or a recipe's trials forked from their variant's zygote (accel/trial/zygote.py): a process that
imported what the trial imports (a script's: the probe's `preload`, torch, transformers...; a recipe's:
RECIPE_PRELOAD) once, with the variant's environment. Each trial is
still a process of its own, with its own session, room, allocator, thread pool and compile caches; what it no longer
pays is the interpreter's start and its imports, most of a short trial's cost (7 s a trial of a 5 ms-step loop here,
1 s of it timed), so a bench runs several times the trials in the same minutes, and the interval a verdict needs,
whose noise lies between processes, narrows with them (docs/bench.md, how a trial is measured).

A trial starts fresh, as before, where the command is not `python SCRIPT ...` or `python -m MODULE ...`, the probe
preloaded nothing (the script changed its environment before its imports), a trial times a target or a curve (its
time runs from the process's start), it runs in a revision's checkout that holds its own accel, the zygote could not
start (an import failed or left a thread running), or `ACCEL_ZYGOTE=off`."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from ..engine import trial_variables
from ..runs.signals import die_with_parent

ZYGOTE = Path(__file__).resolve().parents[1] / "trial" / "zygote.py"  # run as a file: nothing imports the trial
CHOICE = "ACCEL_ZYGOTE"  # off: every trial a fresh process
READY_S = 600.0  # a zygote's imports may take this long (transformers on a busy machine: a minute)
MOST = 16  # zygotes alive at once (a variant's each); beyond, trials start fresh
MEMORY_SHARE = 0.25  # no new zygote once those alive hold this share of the machine's memory (transformers': 1 GB)
# the libraries a recipe's trial (`python -m accel.bench.trial`) imports, torch's `torch._dynamo` at its first
# optimizer step among them; accel itself is left to the trial, which reads its settings from its environment
RECIPE_PRELOAD = ("torch", "torch._dynamo", "torchvision", "numpy", "pydantic", "yaml", "rich", "psutil")


def eligible(argv: list[str], env: dict[str, str], preload: list[str]) -> bool:
    """Whether a trial of `argv` with `env` may be forked from a zygote importing `preload` (ACCEL_ZYGOTE=off in
    its environment: no, so `--vary env:ACCEL_ZYGOTE=on,off` benches forked trials against fresh ones)."""
    if env.get(CHOICE, "").lower() in ("off", "0", "no") or not preload or len(argv) < 2:
        return False
    if not Path(argv[0]).name.startswith("python"):
        return False
    module = argv[1] == "-m" and len(argv) > 2
    return module or (not argv[1].startswith("-") and os.path.isfile(argv[1]))


# what makes a process a trial (the zygote imports, it joins nothing), and what differs between a variant's trials
# (its record, its room's journal, its cold compile caches, read by torch when it compiles, not at import)
TRIALS_OWN = (
    trial_variables.PATH,
    trial_variables.PROFILE,
    trial_variables.JOURNAL,
    trial_variables.EXITS,
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
)


def _zygote_env(env: dict[str, str]) -> dict[str, str]:
    """The variant's environment, less each trial's own."""
    return {name: value for name, value in env.items() if name not in TRIALS_OWN}


class ZygoteGone(Exception):
    """The zygote ended (killed, out of memory) while it served a trial."""


class Zygote:
    """One variant's zygote, serving its trials one at a time."""

    def __init__(self, python: str, env: dict[str, str], preload: list[str], log: Path) -> None:
        requests_r, self.requests = os.pipe()
        self.replies, replies_w = os.pipe()
        # torch._dynamo makes its cache's folder as it is imported: in the bench's folder, not the temporary one
        caches = {"TORCHINDUCTOR_CACHE_DIR": str(log.parent / "inductor-cache")}
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [python, str(ZYGOTE), str(requests_r), str(replies_w), *preload],
                env=_zygote_env(env) | caches,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(requests_r, replies_w),
                start_new_session=True,  # Ctrl-C reaches the bench alone, which ends its zygotes
                preexec_fn=die_with_parent,
            )
        os.close(requests_r)
        os.close(replies_w)
        self.buffer = b""
        self.forks = 0  # the trials it forked (one whose fork failed started fresh instead)
        self.refused: str | None = None
        self.preload_s: float | None = None
        ready = self._read(READY_S)
        if ready is None:
            self.refused = f"its imports took over {READY_S:g} s"
        elif "refused" in ready:
            self.refused = ready["refused"]
        else:
            self.preload_s = ready["ready"]
        if self.refused:
            self.close()

    def _read(self, timeout: float | None) -> dict | None:
        """The zygote's next reply; None once `timeout` passed without one. ZygoteGone when it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies, 65536)
            if not chunk:
                raise ZygoteGone(f"the zygote ended ({self.proc.poll()})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def fork(self, argv: list[str], env: dict[str, str], cwd: Path | None, log: Path, view) -> "Forked":
        """A trial of `argv` in a process forked from the zygote, its output appended to `log`."""
        request = {"argv": argv, "env": env, "cwd": str(cwd or os.getcwd()), "log": str(log), "view": view}
        try:
            os.write(self.requests, (json.dumps(request) + "\n").encode())
        except OSError as err:  # it ended since its last trial
            raise ZygoteGone(f"the zygote ended ({err})") from None
        started = self._read(READY_S)
        if started is None:
            raise ZygoteGone("the zygote did not fork the trial")
        self.forks += 1
        return Forked(self, started["pid"])

    def close(self) -> None:
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Forked:
    """A trial forked from a zygote: `pid` (its session's too), `wait` as Popen's, its exit code from the zygote."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                reply = self.zygote._read(timeout)
            except ZygoteGone:
                reply = {"exit": -signal.SIGKILL}
            if reply is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self.returncode = reply["exit"]
        return self.returncode


class Zygotes:
    """The bench's zygotes, one a variant's (its interpreter and environment), closed with the bench; `say` tells
    the user why a variant's trials start fresh after all."""

    def __init__(self, folder: Path, say: Callable[[str], None] = print) -> None:
        self.folder, self.say = folder, say
        self.alive: dict[tuple, Zygote] = {}
        self.refused: dict[tuple, str] = {}
        self.started_s = 0.0  # the zygotes' starts, one-off costs of the trials that met them

    def __enter__(self) -> "Zygotes":
        return self

    def __exit__(self, *exc: object) -> None:
        for zygote in self.alive.values():
            zygote.close()
        self.alive.clear()

    def for_trial(self, argv: list[str], env: dict[str, str], preload: list[str], name: str) -> Zygote | None:
        """The zygote a trial of `argv` forks from, started at its first trial; None: the trial starts fresh."""
        if not eligible(argv, env, preload):
            return None
        key = (argv[0], tuple(sorted(_zygote_env(env).items())), tuple(preload))
        zygote = self.alive.pop(key, None)
        if zygote is not None and zygote.proc.poll() is None:
            self.alive[key] = zygote
            return zygote
        if zygote is not None:  # ended (killed, out of memory): a new one takes its place
            zygote.close()
        if key in self.refused:
            return None
        full = self._full()
        if full:
            return self._refuse(key, name, full)
        self.folder.mkdir(parents=True, exist_ok=True)
        tick = time.perf_counter()
        zygote = Zygote(argv[0], env, preload, self.folder / f"zygote-{len(self.alive) + len(self.refused)}.log")
        self.started_s += time.perf_counter() - tick
        if zygote.refused:
            return self._refuse(key, name, zygote.refused)
        self.alive[key] = zygote
        return zygote

    def _refuse(self, key: tuple, name: str, why: str) -> None:
        """The variant's trials start fresh from here on, said once."""
        self.refused[key] = f"{name}: its trials start as fresh processes: {why}"
        self.say(self.refused[key])

    def _full(self) -> str | None:
        """Why no more zygotes may start (None: one may)."""
        if len(self.alive) >= MOST:
            return f"{MOST} zygotes are alive already"
        held = sum(_memory(z.proc.pid) for z in self.alive.values())
        total = psutil.virtual_memory().total
        if held > MEMORY_SHARE * total:
            return f"the zygotes alive hold {held / 2**30:.1f} GiB, over {MEMORY_SHARE:.0%} of this machine's memory"
        return None


def _memory(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0
