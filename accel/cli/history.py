"""`accel history FILE [--html OUT]`: what `accel bench --history FILE` recorded, per commit per machine, with the
commits where the figure stepped marked (docs/bench.md, "Did my change slow training down?")."""

from __future__ import annotations

import argparse
from pathlib import Path


def add(commands) -> None:
    parser = commands.add_parser(
        "history",
        help="samples/s per commit per machine from `accel bench --history FILE`, the commits where it stepped "
        "marked; a table, and a page with its plot",
    )
    parser.add_argument("file", help="a history file that `accel bench --history FILE.jsonl` wrote")
    parser.add_argument("--html", metavar="OUT.html", help="also write a page with each series' table and plot")
    parser.set_defaults(run=history)


def history(args: argparse.Namespace) -> int:
    from ..bench.history import read
    from ..bench.history_report import series, text, write_html
    from ..io import check_file_out

    if args.html:
        check_file_out(Path(args.html), "--html")
    found = series(read(Path(args.file)))
    print(text(found), end="")
    if args.html:
        print(write_html(found, Path(args.html), Path(args.file)))
    return 0
