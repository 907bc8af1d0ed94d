"""`accel bench --rev A,B`, `--bisect GOOD..BAD`, `--fail-if-slower 3%` and `--history FILE.jsonl`: the bench
pointed at revisions of the user's repository (docs/bench.md, "Did my change slow training down?")."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import AccelError
from ..runs.runlock import hold

DEFAULT_BISECT_SHARE = "5%"


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rev",
        type=lambda text: [r.strip() for r in text.split(",") if r.strip()],
        metavar="A,B",
        help="compare revisions of the repository (commits, branches, tags; `.`: the working tree with its "
        "uncommitted changes), each run from its own git worktree, interleaved; each is read against the first",
    )
    parser.add_argument(
        "--fail-if-slower",
        metavar="3%",
        help="with --rev: exit 1 when the interval says a revision is slower than the first by more than this, "
        "0 when it says not, 4 when the run could not tell (it says how many trials would); with --bisect: what "
        "counts as slower (default 5%%). Each comparison adds rounds until it decides at this share",
    )
    parser.add_argument(
        "--history",
        metavar="FILE.jsonl",
        help="append each revision's figures with its commit, the date and this machine's fingerprint "
        "(`accel history FILE` shows them); without --rev, the working tree is the revision",
    )
    parser.add_argument(
        "--bisect",
        metavar="GOOD..BAD",
        help="find the first commit after GOOD up to BAD that is slower than GOOD, in about log2(n) comparisons",
    )


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.rev or args.bisect or args.history)


def bench_revisions(args: argparse.Namespace) -> int:
    """`accel bench --rev|--bisect|--history ...`: exit 0, 1 for --fail-if-slower's verdict (or when every trial
    failed), 4 when it could not tell, 130 interrupted."""
    from ..bench.rev_compare import parse_share
    from ..bench.revisions import Checkouts, repo_root
    from ..bench.runner import signals_as_ctrl_c

    subject, settings = _subject(args)
    if args.history:
        from ..bench.history import check_appendable

        check_appendable(Path(args.history))
    allowed = parse_share(args.fail_if_slower) if args.fail_if_slower else None
    root = repo_root()
    try:
        # SIGTERM and SIGHUP as Ctrl-C: the checkouts are removed at the end whatever stopped it
        with signals_as_ctrl_c(), Checkouts(root) as checkouts:
            if args.bisect:
                return _bisect(args, subject, settings, root, checkouts, allowed)
            return _compare(args, subject, settings, root, checkouts, allowed)
    except KeyboardInterrupt:
        print("interrupted: the revisions' checkouts were removed", file=sys.stderr)
        return 130


def _subject(args: argparse.Namespace):
    from ..bench.rev_plan import Subject
    from .bench import recipe_settings, script_settings

    if args.ablate or args.only or args.list:
        raise AccelError(
            "--rev, --bisect and --history compare revisions, each with the same variants: give --vary (or "
            "nothing), not --ablate, --only or --list."
        )
    if args.rev and args.bisect:
        raise AccelError("give --rev A,B to compare revisions, or --bisect GOOD..BAD to search between two, not both.")
    if args.fail_if_slower and not (len(args.rev or []) > 1 or args.bisect):
        raise AccelError("--fail-if-slower needs revisions to compare: --rev BASE,NEW (or --bisect GOOD..BAD).")
    if args.bisect and args.vary:
        raise AccelError("--bisect compares one configuration: leave out --vary.")
    if args.user_script is not None:
        if not args.user_script:
            raise AccelError(
                "no script after `--`: give its command, e.g. `accel bench --rev HEAD,. -- python train.py`."
            )
        if args.recipe is not None:
            script = shlex.join(args.user_script)
            raise AccelError(f"give a recipe or a script, not both: `{args.recipe}` and `{script}`.")
        return Subject(args.user_script, None, args.overrides, args.vary), script_settings(args)
    if args.recipe is None:
        raise AccelError("accel bench --rev needs a recipe, or a script after the options: `-- python train.py ARGS`.")
    return Subject(None, args.recipe, args.overrides, args.vary), recipe_settings(args)


def _out(args: argparse.Namespace, name: str) -> Path:
    from ..io import default_out
    from ..runs.rundir import check_results_out

    out = Path(args.out) if args.out else default_out(name, kind="bench")
    check_results_out(out, "bench")
    return out


def _compare(args, subject, settings, root, checkouts, allowed) -> int:
    from ..bench import history
    from ..bench.rev_compare import gate
    from ..bench.rev_plan import bench_revisions as run
    from ..bench.revisions import resolve_all
    from .bench import finish

    revisions = resolve_all(root, args.rev or ["."])
    out = _out(args, subject.name)
    with hold(out):
        report = run(subject, revisions, checkouts, out, settings, args.rounds, shlex.join(["accel", *args.argv]))
    code = finish(report, out)
    if report.interrupted:
        return code
    if args.history:
        found = history.entries(report, out)
        closed = history.append(Path(args.history), found)
        after = ", after its cut last line (kept on a line of its own)" if closed else ""
        print(f"history: {len(found)} line(s) appended to {args.history}{after}")
    if allowed is not None and code == 0:
        code, lines = gate(report.revision_readings or [], allowed)
        print("\n".join(lines))
    return code


def _bisect(args, subject, settings, root, checkouts, allowed) -> int:
    from ..bench import history
    from ..bench.bisect import bisect
    from ..bench.rev_compare import CANNOT_TELL_EXIT, Judged, parse_share
    from ..bench.rev_plan import bench_revisions as run
    from ..bench.revisions import commits_between

    good, sep, bad = args.bisect.partition("..")
    if not sep or not good or not bad:
        raise AccelError(f"--bisect {args.bisect!r}: give GOOD..BAD, e.g. --bisect v1.2..HEAD.")
    commits = commits_between(root, good, bad)
    out = _out(args, f"{subject.name}-bisect")
    said = shlex.join(["accel", *args.argv])

    def compare(reference, candidate, folder: Path):
        report = run(subject, [reference, candidate], checkouts, folder, settings, args.rounds, said)
        if args.history and not report.interrupted:
            history.append(Path(args.history), history.entries(report, folder))
        return report

    print(f"bisecting {len(commits) - 1} commits after {commits[0].label} up to {commits[-1].label}")
    allowed = allowed if allowed is not None else parse_share(DEFAULT_BISECT_SHARE)
    # each comparison decides at the slowdown the search is for
    args.rounds = replace(args.rounds, resolution=args.resolution or allowed, gate=allowed)
    with hold(out):
        found = bisect(commits, allowed, compare, out, lambda line: print(line, flush=True))
    print(out)
    print(found.said)
    if any(s.reading is None for s in found.steps):
        return 130
    if found.steps and found.steps[-1].judged == Judged.FAILED:
        return 1  # a commit that does not train: a failure, not a measurement that could not tell
    if found.remaining:
        return CANNOT_TELL_EXIT
    return 0 if found.first_slower else 1
