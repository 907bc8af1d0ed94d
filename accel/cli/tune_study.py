"""`accel tune --objective time`'s study options: where the learning stages' rounds are kept (--storage, --study),
who runs them (--workers N here, --join URL from anywhere), and a --work folder whose study a rerun continues."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ..errors import AccelError
from .options import positive_int

STOP_S = 10.0  # how long the search waits for its workers to see it has ended


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="with --objective time: the Optuna storage of the learning stages' study (default: "
        "sqlite:///WORK/study.db); a shared one (postgresql://..., or SQLite on a shared file system) lets "
        "workers on other machines join",
    )
    parser.add_argument(
        "--study",
        metavar="NAME",
        help="with --objective time: the study's name (default: one derived from the command, so the same command "
        "again continues it)",
    )
    parser.add_argument(
        "--dashboard",
        metavar="URL",
        help="serve optuna-dashboard on the tune study at URL (its --storage: sqlite:///WORK/study.db by default) "
        "at http://127.0.0.1:PORT/ until Ctrl-C, while the search runs or after it: each stage a study, each round a "
        "trial with what its candidates read",
    )
    parser.add_argument(
        "--dashboard-port", type=int, default=8080, metavar="PORT", help="--dashboard's port (default 8080)"
    )
    parser.add_argument(
        "--join",
        metavar="URL",
        help="run as a worker of the tune whose study is at URL (its --storage; --study NAME where it holds "
        "several): takes its rounds until that tune ends",
    )


def prepare(args: argparse.Namespace, work: Path) -> int:
    """Before anything runs: the study options checked, the tune extra asked for, the --work folder checked (one a
    killed time search left is continued); the worker processes --workers asks for (1: this one)."""
    from ..runs.rundir import check_results_out

    time = args.objective == "time"
    if not time and (args.storage or args.study):
        raise AccelError("--storage and --study need --objective time: the speed objective's stages run here.")
    if time:
        from ..extras import require

        require("accel tune --objective time (its learning stages run on an Optuna study)", "optuna")
    if continues(work, time):
        print(f"continuing the study of the unfinished tune in {work}", file=sys.stderr)
    else:
        check_results_out(work, "tune", "--work")
    return search_workers(args) if time else 1


def study_of(args: argparse.Namespace, work: Path, workers: int):
    """The study a time search runs its learning stages on, its --workers started; None for speed."""
    if args.objective != "time":
        return None
    from ..bench.tune.study import StudySpec, default_name, default_storage, storage

    spec = StudySpec(args.storage or default_storage(work), args.study or default_name(args.argv))
    storage(spec)  # a bad URL fails now, before any trial
    if workers > 1:
        from ..bench.tune.workers import start

        print(start(spec, workers, work / "workers"), file=sys.stderr)
    return spec


def search_workers(args: argparse.Namespace) -> int:
    """--workers N under --objective time: the processes sharing the study (1: this one); the option then leaves
    the recipe's DataLoader alone."""
    given, args.workers = args.workers, None
    if given is None:
        return 1
    try:
        return positive_int(given)
    except argparse.ArgumentTypeError:
        raise AccelError(
            f"--workers {given}: with --objective time, the number of worker processes sharing the study (e.g. "
            "--workers 2); DataLoader worker counts belong to --objective speed."
        ) from None


def stop(spec) -> None:
    """Wait a moment for the search's own workers to end (the study says it has), then end any still running."""
    for process in spec.helpers if spec is not None else ():
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()


def continues(work: Path, time: bool) -> bool:
    """A --work folder a time search left unfinished (its study, and no tune.json or one of a search cut short):
    the same command continues it."""
    if not time or not (work / "study.db").exists():
        return False
    record = work / "tune.json"
    return not record.exists() or bool(json.loads(record.read_text()).get("interrupted"))


def dashboard(args: argparse.Namespace) -> int:
    """`accel tune --dashboard URL`: optuna-dashboard on the study's storage, until Ctrl-C."""
    from ..bench.tune.study import NEEDS_DASHBOARD, StudySpec, storage
    from ..extras import import_or_explain

    served = import_or_explain("optuna_dashboard", NEEDS_DASHBOARD)
    store = storage(StudySpec(args.dashboard, ""))  # a bad URL fails here, saying so
    print(f"optuna-dashboard of {args.dashboard}: http://127.0.0.1:{args.dashboard_port}/ (Ctrl-C ends it)")
    try:
        served.run_server(store, host="127.0.0.1", port=args.dashboard_port)
    except KeyboardInterrupt:
        pass
    return 0


def join(args: argparse.Namespace) -> int:
    """`accel tune --join URL`: a worker of another tune's study."""
    from ..bench import runner
    from ..bench.tune.study import StudySpec, join, only_search

    spec = StudySpec(args.join, args.study or only_search(args.join))
    ran = join(spec, runner.run_trials)
    print(f"{spec.name}: {ran} round(s) run here", file=sys.stderr)
    return 0
