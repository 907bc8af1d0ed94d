"""A variant's zygote: a Python process that imports what the script imports (the probe's `preload`) once, then
forks each of the variant's trials from that state, so a trial pays for its steps, not for `import torch` again
(2-5 s a process here, 9 s with transformers). Run as a file by the bench (accel/bench/zygotes.py), with the
variant's environment but none of accel's trial variables, so the imports see the environment the script would and
nothing joins a trial here.

    python zygote.py REQUESTS_FD REPLIES_FD MODULE...

It replies `{"ready": seconds}` once the modules are imported (or `{"refused": why}`: a module failed, or an import
left a thread running, which a fork would not carry), then serves one trial at a time: a request (its command, folder,
environment, log, the room's view) gets `{"pid": N}`, then `{"exit": code}` (negative: the signal that ended it).

A forked trial is what a fresh `python SCRIPT ARGS` (or `python -m MODULE ARGS`) process with those imports done
would be: a session of its own, its output into the log, the room entered (accel/trial/room_enter.py) before
anything of the script runs, the environment and command line the trial's, the script's folder (the working folder
for `-m`) first on sys.path, global random states drawn anew, the trial joined (accel/trial/join.py), the script run
as `__main__`, and the interpreter's exit (its threads joined, its exit handlers run) as Python's own. Nothing here
imports torch: the modules named do."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback

from accel.runs.process_exit import finish_like_python
from accel.runs.signals import die_with_parent

FORK_CHECK_S = 60.0  # a fork's first parallel calls take well under a second; a hung pool never returns


def _reply(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def preload(modules: list[str]) -> str | None:
    """Import the modules; why the zygote cannot serve (None: it can). A library's submodule that fails to import
    on its own (one meant to be imported only by its package, in some state) is left to the script."""
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # nothing written outside a trial's room
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as err:  # noqa: BLE001 - any failure: the trials start fresh instead
                if "." not in name:
                    return f"importing {name} failed: {type(err).__name__}: {err}"
    finally:
        sys.dont_write_bytecode = writes
    return _threads_left()


def _threads_left() -> str | None:
    """Why a forked trial could not run as a fresh process would (None: it can). A Python thread the imports
    started would be missing from the fork, and a lock it held would stay held there: refused. A native library's
    thread (OpenBLAS's pool, which numpy and scipy start at import; jemalloc's purger, which pyarrow starts) is its
    library's to handle at a fork, which they do with fork handlers; a library that does not would hang the fork's
    first parallel call: a fork that makes one (torch's threads, numpy's BLAS) must finish within FORK_CHECK_S."""
    if threading.active_count() > 1:
        return f"the imports left Python threads running ({', '.join(t.name for t in threading.enumerate()[1:])})"
    pid = os.fork()
    if pid == 0:
        _parallel_calls()
        os._exit(0)
    deadline = time.monotonic() + FORK_CHECK_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return None if code == 0 else f"a forked process failed its first parallel call (exit {code})"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return f"a forked process hung in its first parallel call (over {FORK_CHECK_S:g} s)"


def _parallel_calls() -> None:
    """The calls that start the fork's thread pools: torch's intra-op pool and its BLAS, numpy's BLAS."""
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None:
        matrix = torch.ones(256, 256)
        (matrix @ matrix).add_(1).sum()
    if numpy is not None:
        array = numpy.ones((256, 256))
        (array @ array).sum()


def serve(requests: int, replies: int) -> None:
    with os.fdopen(requests) as lines:
        for line in lines:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(replies)
                _trial(request)  # never returns
            _reply(replies, {"pid": pid})
            _, status = os.waitpid(pid, 0)
            _reply(replies, {"exit": os.waitstatus_to_exitcode(status)})


def _trial(request: dict) -> None:
    """The forked trial: made what a fresh process would be, then the script, then Python's own exit."""
    code = 1
    try:
        os.setsid()
        die_with_parent()
        _output(request["log"])
        os.chdir(request["cwd"])
        if request.get("view"):
            from accel.trial import room_enter

            stage, exits = request["view"]
            room_enter.enter(stage, exits)
        os.environ.clear()
        os.environ.update(request["env"])
        _reseed()
        code = _run(request["argv"])
    except BaseException:  # noqa: BLE001 - the trial's own failure to start, said in its log
        traceback.print_exc()
    _exit(code)


def _output(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _reseed() -> None:
    """Global random states as a fresh process draws them (Python's `random` reseeds itself at a fork)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run(argv: list[str]) -> int:
    from accel.trial import join

    module = argv[2] if argv[1] == "-m" else None
    sys.argv = argv[2:] if module else argv[1:]
    sys.orig_argv = list(argv)
    # as Python puts it before PYTHONPATH: `-m`'s working folder, a script's own
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(argv[1])))
    if join.asked():
        join.join()
    try:
        if module:
            runpy._run_module_as_main(module)  # type: ignore[attr-defined]  # `python -m`'s own way in
        else:
            runpy.run_path(argv[1], run_name="__main__")
    except SystemExit as stop:
        return _exit_code(stop.code)
    except BaseException as uncaught:  # noqa: BLE001 - as Python says it: through sys.excepthook, which a trial's
        sys.excepthook(type(uncaught), uncaught, uncaught.__traceback__)  # agent takes to record the crash
        return -signal.SIGINT if isinstance(uncaught, KeyboardInterrupt) else 1
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit(code: int) -> None:
    """Python's exit: non-daemon threads joined, exit handlers run (accel's own may end the process there), the
    output flushed; an interrupt ends the process by its signal, as Python's does."""
    try:
        finish_like_python()
    finally:
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def main(argv: list[str]) -> None:
    requests, replies = int(argv[1]), int(argv[2])
    sys.path.pop(0)  # this file's folder: its modules must not shadow the libraries preloaded
    die_with_parent()
    tick = time.perf_counter()
    refused = preload(argv[3:])
    if refused:
        _reply(replies, {"refused": refused})
        return
    _reply(replies, {"ready": time.perf_counter() - tick})
    serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv)
