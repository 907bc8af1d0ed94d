"""One bench trial as a process of its own: its command line (`TrialSettings`, `trial_argv`; a script's own
`Launch`), its environment (the compile caches it may use, accel importable), and its run, with a record even when
it crashed, timed out or was killed (its process group goes with it: DataLoader workers too)."""

from __future__ import annotations

import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import AccelError
from ..runs.signals import die_with_parent
from .records import Trial
from .zygotes import ZygoteGone

if TYPE_CHECKING:
    from .isolation import Room
    from .zygotes import Zygote

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `accel/`, for the children's imports
# the trial's side (accel/trial), named on a script trial's PYTHONPATH only: its sitecustomize loads in the child
TRIAL_SITE = PACKAGE_ROOT / "accel" / "trial" / "site"
TAIL_LINES = 30
LOG_SEPARATOR = "-" * 40  # ends a trial log's header: what follows is the process's own output
# the instrument's record of a script that ended before its first optimizer step (accel/trial/instrument); where it
# exited on an error of its own, the trial says that error instead (`own_error`)
NEVER_STEPPED = (
    "the script ended without stepping an optimizer (no torch.optim optimizer's step() ran): accel measures a script "
    "by its optimizer steps"
)
ERROR_LINE = re.compile(r"error|exception", re.IGNORECASE)
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # what stops a bench (accel/bench/runner.py)
SYNCS = ("step", "window")  # TrialSettings.sync
WINDOW_WITH_EVALS = (
    "--sync window times the steps as one window, so an evaluation inside it would be timed as training: use it "
    "without --target (a time to a target is timed in step mode)."
)


@dataclass
class TrialSettings:
    """How every trial runs: timed steps, warm-up steps, the per-trial time limit and the compile cache."""

    steps: int
    warmup: int
    timeout: float | None = None
    warm_cache: bool = False
    target: str | None = None  # METRIC=VALUE: time each trial until the metric reaches VALUE
    eval_every: int | None = None
    evaluate: bool = True  # False: no evaluation at all (tune guards results by the training loss alone)
    # tune --objective time: every trial trains on `samples` samples whatever its batch size, evaluates on
    # `eval_batches` batches, records its curve (`curve`: also with no target yet) and stops at the target
    samples: int | None = None
    eval_batches: int | None = None
    curve: bool = False
    stop_at_target: bool = False
    # tune's pruner: a candidate ends short of the target once it cannot reach it by `deadline_s` (set for each
    # trial by the runner: PRUNE_SLACK times the time of the variant `deadline_from` in the same round)
    deadline_from: str | None = None
    deadline_s: float | None = None
    # "step": the device synchronised after every step (exact step times; the host cannot prepare the next batch
    # while the device works); "window": only around the timed steps, whose throughput is then a real run's
    sync: str = "step"
    metric_patterns: tuple[str, ...] = ()  # a script's metrics from its printed lines (--metric-pattern)
    run_steps: int | None = None  # the real run's optimizer steps (--run-steps), for the recommendation
    # --window: each trial times steps until it has `steps` and this many seconds of them (0: the count alone)
    window: float = 0.0

    def __post_init__(self) -> None:
        if self.sync not in SYNCS:
            raise AccelError(f"sync must be one of {', '.join(SYNCS)}, got {self.sync!r}.")
        if self.sync == "window" and (self.target or self.curve):
            raise AccelError(WINDOW_WITH_EVALS)
        if not 0 <= self.window < math.inf:  # NaN fails both comparisons
            raise AccelError(f"the timed window must be a finite number of seconds >= 0, got {self.window}.")


def trial_argv(recipe: Path, settings: TrialSettings, json_path: Path, variant: str, trial: int) -> list[str]:
    """The command line of one trial process."""
    return [
        sys.executable,
        "-m",
        "accel.bench.trial",
        str(recipe),
        "--steps",
        str(settings.steps),
        "--warmup",
        str(settings.warmup),
        "--json",
        str(json_path),
        f"--variant={variant}",
        "--trial",
        str(trial),  # `=`: a name like -amp is not an option
        *(["--target", settings.target] if settings.target else []),
        *(["--eval-every", str(settings.eval_every)] if settings.eval_every else []),
        *(["--curve"] if settings.curve else []),
        *(["--eval-batches", str(settings.eval_batches)] if settings.eval_batches else []),
        *(["--samples", str(settings.samples)] if settings.samples else []),
        *(["--stop-at-target"] if settings.stop_at_target else []),
        *(["--deadline", repr(settings.deadline_s)] if settings.deadline_s is not None else []),
        *([] if settings.evaluate else ["--no-eval"]),
        *(["--sync", settings.sync] if settings.sync != "step" else []),
        *(["--window", repr(settings.window)] if settings.window else []),
    ]


class Launch(Protocol):
    """How a variant's trial starts when it is not a recipe file: a user's script (accel.bench.script)."""

    def launch(self, settings: TrialSettings, json_path: Path) -> tuple[list[str], dict[str, str]]:
        """The command line and the environment variables it adds."""

    def settings(self) -> str:
        """What the variant sets, for its trials' logs."""


def trial_env(cache_dir: Path) -> dict[str, str]:
    """The parent's environment, with the compile caches pointed at `cache_dir` and accel importable."""
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")  # else Triton keeps kernels warm in ~/.triton
    env["PYTHONPATH"] = _pythonpath(str(PACKAGE_ROOT))
    env["PYTHONUNBUFFERED"] = "1"  # the log tail must hold the last words of a process that died
    return env


def _pythonpath(*first: str) -> str:
    return os.pathsep.join(p for p in (*first, os.environ.get("PYTHONPATH")) if p)


def instrumented_pythonpath() -> str:
    """A script trial's PYTHONPATH: the trial's sitecustomize loads before the script's first line."""
    return _pythonpath(str(TRIAL_SITE), str(PACKAGE_ROOT))


def log_header(argv: list[str], env: dict[str, str], variant: str | None = None) -> str:
    """What made a trial's log, at its top: the command as run, the variant, and the environment variables accel
    set or the variant changed (those that differ from the parent's), then a separator."""
    changed = sorted((name, value) for name, value in env.items() if os.environ.get(name) != value)
    lines = [
        f"command: {shlex.join(argv)}",
        *([f"variant: {variant}"] if variant else []),
        *(f"env: {name}={shlex.quote(value)}" for name, value in changed),
    ]
    return "\n".join([*lines, LOG_SEPARATOR, ""])


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` of the process's own output (the header left out)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    output = text.split(f"{LOG_SEPARATOR}\n", 1)[-1]
    return "\n".join(output.splitlines()[-lines:])


class Process(Protocol):
    """A trial's process: a Popen, or one forked from a zygote (accel/bench/zygotes.py)."""

    pid: int

    def wait(self, timeout: float | None = None) -> int: ...


def _kill_group(proc: Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the trial and its DataLoader workers, nothing else
    except ProcessLookupError:
        pass
    proc.wait()


def exit_reason(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (often the out-of-memory killer)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {code}"


def _read_result(path: Path) -> Trial | None:
    try:
        return Trial.model_validate_json(path.read_text())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def run_logged(
    argv: list[str],
    log_path: Path,
    env: dict[str, str],
    timeout: float | None,
    cwd: Path | None = None,
    watch: Callable[[float], bool] | None = None,
    room: Room | None = None,
    variant: str | None = None,
    zygote: Zygote | None = None,
) -> int | None:
    """Run `argv` in a session of its own (in `cwd`: a revision's checkout; in `room`: a script's trial, which
    leaves the user's files as they were; forked from `zygote`, which imported what it imports), its output into
    `log_path` after a header saying what made it (`log_header`, `variant` among it); its exit code, or None when
    it ran past `timeout` or `watch` (called about every second with the seconds so far) said to stop it, and it
    was killed with its whole group (DataLoader workers too)."""
    log_path.write_text(log_header(argv, env, variant))  # the command as given, not the room's wrapper of it
    if room is None:
        forked = _fork(zygote, argv, env, cwd, log_path, None)
        return _waited(forked, timeout, watch) if forked else _run_logged(argv, log_path, env, timeout, cwd, watch)
    with room.entered(argv, env) as (entered, env):
        forked = _fork(zygote, argv, env, cwd, log_path, room.view)
        if forked is not None:
            return _waited(forked, timeout, watch)
        return _run_logged(entered, log_path, env, timeout, cwd, watch)


def _fork(zygote: Zygote | None, argv: list[str], env: dict[str, str], cwd: Path | None, log: Path, view):
    """The trial forked from `zygote`; None: it starts fresh (no zygote, or one that ended since its last trial)."""
    if zygote is None:
        return None
    try:
        return zygote.fork(argv, env, cwd, log, view)
    except ZygoteGone:
        return None


def _run_logged(
    argv: list[str],
    log_path: Path,
    env: dict[str, str],
    timeout: float | None,
    cwd: Path | None,
    watch: Callable[[float], bool] | None,
) -> int | None:
    # Ctrl-C or SIGTERM held off while the child forks: a handler that raised then ran in logging's after-fork
    # hook, which swallowed the KeyboardInterrupt, and a bench stopped there trained on to its end
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    with log_path.open("a") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=lambda: _child_setup(held),
            )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile is raised here
        except BaseException:
            _kill_group(proc)
            raise
        return _waited(proc, timeout, watch)


def _waited(proc: Process, timeout: float | None, watch: Callable[[float], bool] | None) -> int | None:
    """`proc`'s exit code (None: it ran past `timeout` or `watch` stopped it); its group is killed either way."""
    try:
        code = proc.wait(timeout=timeout) if watch is None else _watched(proc, timeout, watch)
        _kill_group(proc)  # what it left behind (DataLoader workers of a trial ended without teardown)
        return code
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None
    except BaseException:  # Ctrl-C reaches only us (new session): take the process down with us
        _kill_group(proc)
        raise


def _watched(proc: Process, timeout: float | None, watch: Callable[[float], bool]) -> int:
    """`proc`'s exit code; TimeoutExpired once it ran past `timeout` or `watch` said to stop it."""
    start = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - start
            if (timeout is not None and elapsed >= timeout) or watch(elapsed):
                raise


def _child_setup(mask: set[signal.Signals]) -> None:
    """The child's signals as the parent had them before it held some off, and its death with its parent."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    die_with_parent()


def own_error(code: int, log_path: Path) -> str:
    """A script that exited on an error of its own before stepping (its parser refused an option, it raised
    SystemExit("...")): that error's line, its last words that name one, with its last output."""
    tail = log_tail(log_path)
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if ERROR_LINE.search(line)), lines[-1] if lines else "no output")
    return f"the script {exit_reason(code)} before its first optimizer step: {said}\nlast output:\n{tail}"


def run_trial_process(
    argv: list[str],
    json_path: Path,
    log_path: Path,
    timeout: float | None,
    env: dict[str, str],
    cwd: Path | None = None,
    room: Room | None = None,
    variant: str | None = None,
    zygote: Zygote | None = None,
) -> Trial:
    """Run one trial command (forked from `zygote` where given); its record, or one holding only `error` with the
    output tail when it crashed, timed out or wrote no readable record. Output goes to `log_path` (its header naming
    `variant`); what kept the user's files, to `files`."""
    json_path.unlink(missing_ok=True)
    code = run_logged(argv, log_path, env, timeout, cwd, room=room, variant=variant, zygote=zygote)
    kept = {} if room is None else {"files": room.kept.said(), "files_restored": room.kept.restored}
    return _result(code, json_path, log_path, timeout).updated(**kept)


def _result(code: int | None, json_path: Path, log_path: Path, timeout: float | None) -> Trial:
    if code is None:
        return Trial(error=f"timed out after {timeout:g} s (--timeout); last output:\n{log_tail(log_path)}")
    result = _read_result(json_path)
    if result is None:
        return Trial(
            error=f"trial process {exit_reason(code)} without a readable result; last output:\n{log_tail(log_path)}"
        )
    if code != 0 and result.error == NEVER_STEPPED:
        return result.updated(error=own_error(code, log_path))
    if code != 0 and result.error is None:
        result = result.updated(
            error=f"trial process {exit_reason(code)} after writing its result; last output:\n{log_tail(log_path)}"
        )
    return result
