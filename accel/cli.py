"""`accel` on the command line. Thin: parse, load and validate the recipe, call the library."""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from .errors import AccelError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accel", description="Faster PyTorch training, with the proof.")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a recipe into a run directory")
    train.add_argument("recipe", help="path to a recipe YAML file")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a recipe key, e.g. --set optim.lr=1e-3 (repeatable)")
    train.add_argument("--out", help="run directory (default: runs/<name>-<timestamp>)")
    train.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    train.add_argument("--nproc", type=int, default=None, help="processes on this machine, started by torchrun")
    train.add_argument("--nnodes", type=int, default=1, help="machines taking part (with --nproc)")
    train.add_argument("--node-rank", type=int, default=0, help="this machine's index (with --nnodes > 1)")
    train.add_argument("--master-addr", help="address of the machine with node rank 0 (with --nnodes > 1)")
    train.add_argument("--master-port", type=int, help="free port on the master machine")

    commands.add_parser("recipes", help="list the shipped recipes")
    commands.add_parser("speedups", help="list the speed-ups and whether each can run here")
    _add_bench(commands)
    _add_doctor(commands)
    _add_tune(commands)
    _add_cache(commands)
    _add_export(commands)
    return parser


def _add_sets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe key before anything else, e.g. --set data.batch_size=64 (repeatable)")


def _add_trial_options(parser: argparse.ArgumentParser, steps: int, warmup: int, trials: int) -> None:
    parser.add_argument("--steps", type=int, default=steps, help=f"timed optimizer steps per trial (default {steps})")
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed steps before them; compile happens here (default {warmup})")
    parser.add_argument("--trials", type=int, default=trials, help=f"fresh processes per variant (default {trials})")
    parser.add_argument("--timeout", type=float, help="seconds before a trial is killed and recorded as failed")
    parser.add_argument("--warm-cache", action="store_true",
                        help="share one TORCHINDUCTOR_CACHE_DIR under the output folder (default: cold per trial)")


def _add_bench(commands) -> None:
    bench = commands.add_parser("bench", help="A/B speed report: variants of a recipe, each trial a fresh process")
    bench.add_argument("recipe", help="path to a recipe YAML file")
    _add_sets(bench)
    bench.add_argument("--ablate", action="store_true",
                       help="baseline (speed-ups off), all on, each removed from all, each added to baseline")
    bench.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2",
                       help="compare values of any recipe key; several --vary give their cartesian product")
    _add_trial_options(bench, steps=20, warmup=3, trials=3)
    bench.add_argument("--out", help="output folder (default: runs/bench-<name>-<timestamp>)")
    bench.add_argument("--list", action="store_true", help="print the variants and exit without running them")
    bench.add_argument("--only", type=lambda text: text.split(","), default=None, metavar="NAME,NAME",
                       help="run only these variants (the baseline is always run), e.g. --only all")


def _add_doctor(commands) -> None:
    doctor = commands.add_parser("doctor", help="versions, devices, threads, backends and known speed traps")
    doctor.add_argument("recipe", nargs="?", help="also check this recipe's loader and speed-up settings")
    _add_sets(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_tune(commands) -> None:
    tune = commands.add_parser("tune", help="measure batch size, workers and threads; write the best as YAML")
    tune.add_argument("recipe", help="path to a recipe YAML file")
    _add_sets(tune)
    tune.add_argument("--batch-sizes", metavar="B1,B2", help="candidates, tried ascending until one fails "
                      "(default: half, 1x, 2x, 4x the recipe's); an empty value skips the knob")
    tune.add_argument("--workers", metavar="N1,N2", help="DataLoader worker counts (default: 0,1,2,4 up to the "
                      "cores); an empty value skips the knob")
    tune.add_argument("--threads", metavar="N1,N2", help="torch thread counts, via the `threads` speed-up "
                      "(default: powers of two up to the cores); an empty value skips the knob")
    tune.add_argument("--try", dest="tries", action="append", default=[], metavar="KEY=V1,V2",
                      help="also search any other recipe key (repeatable)")
    _add_trial_options(tune, steps=10, warmup=3, trials=2)
    tune.add_argument("--out", help="recipe fragment to write (default: WORK/tuned.yaml)")
    tune.add_argument("--work", help="folder for trial recipes and logs (default: runs/tune-<name>-<timestamp>)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for reports that say which command made them
    logging.basicConfig(level=logging.INFO, format="accel: %(message)s", stream=sys.stderr)
    try:
        return COMMANDS[args.command](args)
    except AccelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from .distributed import world_from_env
    from .recipe import load_recipe
    from .run import run_recipe

    if args.resume and not args.out:
        raise AccelError("--resume needs --out RUN_DIR: the run directory whose checkpoints/last.pt to continue.")
    recipe = load_recipe(args.recipe, args.overrides)  # validated here, before any process is started
    if args.nproc:
        if recipe.strategy == "fsdp" and args.nproc * args.nnodes > 1:  # one clear error, not one per rank
            from .fsdp import check_compatible
            from .speedups import from_configs

            check_compatible(from_configs(recipe.speedups))
        return _torchrun(args, recipe.name)
    summary = run_recipe(recipe, args.out, resume=args.resume)
    if not world_from_env().is_main:
        return 0
    print(summary["run_dir"])
    if summary["status"] == "interrupted":
        print(f"interrupted; continue with: accel train {args.recipe} --out {summary['run_dir']} --resume",
              file=sys.stderr)
        return 130
    return 0


def _torchrun(args: argparse.Namespace, name: str) -> int:
    """Re-run this same command in --nproc processes under torchrun, all writing to one run directory."""
    from .distributed import torchrun_command
    from .rundir import RunDir

    out = args.out or str(RunDir.default_for(name).path)  # one name for all ranks, not one timestamp each
    argv = ["train", args.recipe, "--out", out, *(f"--set={item}" for item in args.overrides)]
    argv += ["--resume"] if args.resume else []
    command = torchrun_command(argv, args.nproc, args.nnodes, args.node_rank, args.master_addr, args.master_port)
    return subprocess.call(command)


def _recipes(args: argparse.Namespace) -> int:
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        first = next((line for line in path.read_text().splitlines() if line.startswith("#")), "#")
        print(f"{path.relative_to(RECIPES_DIR.parent)}  {first.lstrip('# ').strip()}")
    return 0


def _speedups(args: argparse.Namespace) -> int:
    from . import builtins  # noqa: F401
    from .devices import resolve_device
    from .registry import SPEEDUPS

    device = resolve_device("auto")
    for name in SPEEDUPS.names():
        speedup = SPEEDUPS.get(name)()
        reason = speedup.unavailable(device)
        doc = (type(speedup).__doc__ or "").strip().splitlines()[0] if type(speedup).__doc__ else ""
        status = "available" if reason is None else f"unavailable here: {reason}"
        print(f"{name:14s} {doc}  [{status}]")
    return 0


def _check_trial_options(args: argparse.Namespace) -> None:
    if args.steps < 1 or args.warmup < 0 or args.trials < 1:
        raise AccelError(f"need --steps >= 1, --warmup >= 0 and --trials >= 1; got {args.steps}, {args.warmup}, "
                         f"{args.trials}.")
    if args.timeout is not None and args.timeout <= 0:
        raise AccelError(f"--timeout must be a positive number of seconds, got {args.timeout}.")


def _bench(args: argparse.Namespace) -> int:
    import shlex

    from .bench.runner import TrialSettings, default_out, plan_bench, run_bench
    from .bench.variants import describe

    plan = plan_bench(args.recipe, args.overrides, args.ablate, args.vary, args.only)
    if args.list:
        print(describe(plan.variants))
        return 0
    _check_trial_options(args)
    out = Path(args.out) if args.out else default_out(plan.name)
    settings = TrialSettings(args.steps, args.warmup, args.timeout, args.warm_cache)
    report, paths = run_bench(plan, out, settings, args.trials, command=shlex.join(["accel", *args.argv]))
    print(out)
    md = paths["md"].read_text().splitlines()
    start = next((i for i, line in enumerate(md) if line.startswith("| variant")), 0)
    print("\n".join(md[start:]))
    return 130 if report["interrupted"] else 0


def _doctor(args: argparse.Namespace) -> int:
    import json

    from .doctor import collect, render
    from .recipe import load_recipe

    recipe = load_recipe(args.recipe, args.overrides) if args.recipe else None
    info = collect(recipe)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        render(info)
    return 0


def _tune(args: argparse.Namespace) -> int:
    import shlex

    from rich.console import Console

    from .bench.runner import TrialSettings, default_out
    from .bench.tune import build_knobs, table, tune, write_fragment
    from .recipe import load_recipe

    _check_trial_options(args)
    base = load_recipe(args.recipe, args.overrides)
    knobs = build_knobs(base, args.batch_sizes, args.workers, args.threads, args.tries)
    if not knobs:
        raise AccelError("nothing to tune: every knob was given an empty list.")
    work = Path(args.work) if args.work else default_out(base.name, kind="tune")
    settings = TrialSettings(args.steps, args.warmup, args.timeout, args.warm_cache)
    result = tune(base, knobs, work, settings, args.trials)
    Console().print(table(result))
    path = write_fragment(result, args.out or work / "tuned.yaml", base, shlex.join(["accel", *args.argv]),
                          settings, args.trials)
    print(path)
    return 0


COMMANDS = {"train": _train, "recipes": _recipes, "speedups": _speedups, "bench": _bench, "doctor": _doctor,
            "tune": _tune}


def _add_cache(commands) -> None:
    cache = commands.add_parser("cache", help="build, list or clear decoded-dataset caches (data.cache)")
    actions = cache.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="decode a recipe's image files into the cache now")
    build.add_argument("recipe", help="path to a recipe YAML file (its data.cache.dir is used)")
    _add_sets(build)
    for action, text in (("info", "list the cache entries"), ("clear", "delete every cache entry")):
        actions.add_parser(action, help=text).add_argument(
            "--dir", help="cache folder (default: $ACCEL_CACHE_DIR, else ~/.cache/accel/decoded)")


def _cache(args: argparse.Namespace) -> int:
    from .data import cache

    if args.action == "build":
        from .recipe import load_recipe

        folders = cache.build_for_recipe(load_recipe(args.recipe, args.overrides))
        if not folders:
            raise AccelError(f"{args.recipe}: the dataset is already in memory; there is nothing to cache.")
        print("\n".join(map(str, folders)))
        return 0
    root = cache.cache_dir(args.dir)
    if args.action == "clear":
        print(f"removed {cache.clear(root)} cache entries from {root}")
        return 0
    found = cache.entries(root)
    print(f"{root}: {len(found)} entries" + "".join(f"\n{cache.describe(entry)}" for entry in found))
    return 0


COMMANDS["cache"] = _cache


def _add_export(commands) -> None:
    export = commands.add_parser("export", help="export a trained run (ONNX, TorchScript, torch.export; int8, "
                                 "pruned) and measure size, accuracy and latency")
    export.add_argument("source", help="run directory (from `accel train --out`) or a checkpoint file in one")
    export.add_argument("--format", default="onnx", choices=["onnx", "torchscript", "exported"])
    export.add_argument("--quantize", action="append", default=[], choices=["dynamic-int8", "static-int8"],
                        help="add an int8 ONNX variant made by onnxruntime (repeatable; needs --format onnx)")
    export.add_argument("--prune", type=float, metavar="AMOUNT", help="zero this fraction of Conv/Linear weights "
                        "by global magnitude before export, e.g. 0.3")
    export.add_argument("--finetune-steps", type=int, help="fine-tune the pruned model for N recipe steps")
    export.add_argument("--out", type=Path, help="output folder (default: SOURCE/export/FORMAT[-pruneAMOUNT])")
    for flag, text in (("--batch-size", "large batch for batch-prediction latency (default 256)"),
                       ("--runs", "timed calls per variant and batch size (default 50)"),
                       ("--warmup", "untimed calls before them (default 10)"),
                       ("--threads", "intra-op threads for PyTorch and onnxruntime (default: torch's)"),
                       ("--calibration-batches", "training batches for static-int8 calibration (default 8)"),
                       ("--val-batches", "validation batches to compare on (default: all)")):
        export.add_argument(flag, type=int, help=text)
    export.add_argument("--atol", type=float, help="allowed max |logit difference| of the fp32 export (1e-4)")


def _export(args: argparse.Namespace) -> int:
    from .export import ExportConfig, export_run, render_table

    options = {key: value for key, value in vars(args).items() if key not in ("command", "source", "argv")}
    report = export_run(args.source, ExportConfig.from_options(**options))
    print(render_table(report))
    print(Path(report["out"]) / "export.json")
    return 0


COMMANDS["export"] = _export

if __name__ == "__main__":
    sys.exit(main())
