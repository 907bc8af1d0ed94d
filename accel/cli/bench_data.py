"""`accel bench-data`: an image-folder recipe's input pipeline alone, four ways side by side (no model)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .options import add_sets


def add(commands) -> None:
    parser = commands.add_parser(
        "bench-data",
        help="samples/s of an image-folder recipe's input pipeline alone: plain, tuned, cache and dali side by side",
    )
    parser.add_argument("recipe", help="an image-folder recipe (a YAML file or a shipped name), e.g. imagefolder-jpeg")
    add_sets(parser)
    parser.add_argument("--batches", type=int, default=40, help="timed batches per pipeline per round (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches at the start of every pass (default 3)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported (default 5)")
    parser.add_argument("--plain-workers", type=int, default=0, help="the plain DataLoader's workers (default 0)")
    parser.add_argument(
        "--only", type=lambda text: text.split(","), metavar="NAME,NAME", help="some of plain,tuned,cache,dali"
    )
    parser.add_argument("--cache-dir", help="decoded cache folder (default: the recipe's data.cache.dir)")
    parser.add_argument("--device", default="cpu", help="where batches are delivered: cpu (default), cuda, auto")
    parser.add_argument("--out", help="folder for bench-data.json (default: runs/bench-data-<name>-<timestamp>)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..bench.data_pipelines import PIPELINES, make_loaders
    from ..bench.data_rates import render, rows, run_rounds
    from ..config.recipe import load_recipe
    from ..devices import environment, resolve_device
    from ..errors import AccelError
    from ..io import default_out, strict_json, write_atomic
    from ..runs.rundir import check_results_out

    if args.batches < 1 or args.warmup < 0 or args.rounds < 1:
        raise AccelError(
            f"need --batches >= 1, --warmup >= 0 and --rounds >= 1; got {args.batches}, {args.warmup}, {args.rounds}."
        )
    recipe, device = load_recipe(args.recipe, args.overrides), resolve_device(args.device)
    out = Path(args.out) if args.out else default_out(recipe.name, kind="bench-data")
    check_results_out(out, "bench-data")
    loaders, facts = make_loaders(recipe, args.only or list(PIPELINES), device, args.plain_workers, args.cache_dir)
    table = rows(run_rounds(loaders, args.rounds, args.warmup, args.batches, device), loaders, facts)
    print(render(table, facts))
    settings = {key: str(value) for key, value in vars(args).items() if key not in ("run", "argv", "command")}
    report = {
        "command": shlex.join(["accel", *args.argv]),
        "settings": settings,
        "facts": facts,
        "rows": table,
        "env": environment(device),
    }
    out.mkdir(parents=True, exist_ok=True)
    print(write_atomic(out / "bench-data.json", strict_json(report, indent=1) + "\n"))
    return 0
