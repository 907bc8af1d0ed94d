"""Is accel's trainer as fast as a plain hand-written PyTorch loop with the same settings? (target: within 3%)

Both loops train the same model on the same DataLoader with the same batch size, in ONE process, alternating
round by round (the order flips every round, so neither side always runs first on a warmer machine). A warm-up
round of each is run first and discarded. Each round times a full pass of `--steps` optimizer steps, the device
synchronised at both ends. Whichever loop runs first in a round is measurably slower (fresh memory, cooler
caches), so rounds are paired, one of each order, and a pair's ratio is the geometric mean of its two rounds'
ratios: the order effect multiplies one and divides the other, and cancels. Prints a table and the accel/plain
time ratio (median over pairs with a bootstrap 95% interval, and the range), and writes JSON.

Two ratios: of whole rounds (every cost, once-per-epoch ones included) and of median step times (each loop's
median seconds between consecutive step ends). A shared VM stalls for seconds at a time and a stall lands in
whichever loop is running (round ratios of one ResNet-18 run here spread from 0.81 to 1.47); a median step
ignores stalls that hit fewer than half the steps, so it tells a per-step overhead of a few % apart from them.

`--amp bf16` and `--channels-last` turn on accel's speed-ups and the same changes in the plain loop (autocast
around forward and loss; the model and each batch in channels_last), written as an expert would by hand. A
speed-up accel skips on this machine (bf16 where the CPU has no native bf16) is left out of both loops.

`--recipe FILE [--set KEY=VALUE ...]` compares on a recipe instead (an image classifier's: its model, data,
optimizer, schedule, clipping and speed-ups; a tuned fragment's values as --set): accel trains the recipe as
`accel train` would, its evaluation left out (the plain loop evaluates nothing either), and the plain loop
writes the same speed-ups by hand, steps the same schedule and clips as the recipe says. `--plain-set KEY=VALUE`
changes the plain loop's side only: accel with a tuned configuration against the best plain loop an expert wrote
by hand (e.g. channels_last on), side by side. Ratios are then of time per sample, so batch sizes may differ.

Tiny: python benchmarks/compare_plain_loop.py --model small_cnn --shape 1 16 16 --batch-size 16 --steps 5 --rounds 2
Real: python benchmarks/compare_plain_loop.py --model resnet18_cifar --batch-size 128 --steps 15 --rounds 8
Recipe's: python benchmarks/compare_plain_loop.py --amp bf16 --channels-last --steps 15 --rounds 8
A recipe: python benchmarks/compare_plain_loop.py --recipe cifar10-resnet18 --set KEY=VALUE
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from accel import devices
from accel.bench.revisions import git
from accel.bench.stats import bootstrap_median_ci
from accel.callbacks.base import Callback
from accel.config.recipe import Recipe, load_recipe, validate_recipe
from accel.errors import AccelError
from accel.train.run import build_trainer
from accel.train.trainer import Trainer

TARGET = 1.03  # accel may take at most 3% longer than the plain loop
HERE = Path(__file__).parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18_cifar", help="small_cnn | resnet18_cifar | torchvision:NAME")
    parser.add_argument(
        "--shape", type=int, nargs=3, default=[3, 32, 32], metavar=("C", "H", "W"), help="synthetic image shape"
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=15, help="optimizer steps timed per round and loop")
    parser.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="timed rounds, each running both loops once; rounded up to an even number (pairs)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | ...")
    parser.add_argument("--amp", choices=["bf16", "fp16"], default=None, help="autocast dtype, in both loops")
    parser.add_argument("--channels-last", action="store_true", help="NHWC model and batches, in both loops")
    parser.add_argument(
        "--recipe",
        type=Path,
        default=None,
        help="compare on this recipe (--model, --shape, --batch-size, --amp, --channels-last and "
        "--device are then unused)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override (repeatable)")
    parser.add_argument(
        "--plain-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override for the plain loop's side only (repeatable; with --recipe)",
    )
    parser.add_argument("--json", type=Path, default=Path("runs/compare_plain_loop.json"), help="JSON output path")
    return parser.parse_args(argv)


def make_recipe(args: argparse.Namespace, plain_sets: list[str] = ()) -> Recipe:
    """--recipe with --set (then `plain_sets`), `steps` steps and no mid-run evaluation; else a synthetic recipe
    whose training set is exactly `steps` batches (one round is one epoch) with the speed-ups of --amp and
    --channels-last."""
    if plain_sets and not args.recipe:
        raise AccelError("compare_plain_loop: --plain-set needs --recipe.")
    if args.recipe:
        recipe = load_recipe(
            args.recipe,
            [
                *args.set,
                *plain_sets,
                f"train.max_steps={args.steps}",
                "train.eval_every_epochs=0",
                "train.early_stopping=null",
                "log.progress=false",
                "log.tensorboard=false",
            ],
        )
        if recipe.train.grad_accum != 1:
            raise AccelError("compare_plain_loop: the plain loop does not accumulate gradients; use grad_accum 1.")
        return recipe
    return validate_recipe(
        {
            "name": "compare-plain-loop",
            "seed": 0,
            "model": {"name": args.model},
            "data": {
                "dataset": {
                    "name": "synthetic",
                    "shape": args.shape,
                    "num_classes": 10,
                    "val_fraction": 0.0,
                    "num_samples": args.steps * args.batch_size,
                },
                "batch_size": args.batch_size,
            },
            "optim": {"name": "sgd", "lr": 0.01},
            "train": {"max_steps": args.steps, "eval_every_epochs": 0},
            "speedups": speedups(args),
            "device": args.device,
            "log": {"progress": False, "tensorboard": False},
        }
    )


def speedups(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {"amp": {"dtype": args.amp}} if args.amp else {}
    return chosen | ({"channels_last": {}} if args.channels_last else {})


class StepEnds(Callback):
    """When each of accel's optimizer steps ended (after the step's callbacks so far: accel's own work counts)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_batch_end(self, trainer, info) -> None:
        if info.optimizer_stepped:
            devices.synchronize(trainer.device)
            self.stamps.append(time.perf_counter())


def median_step(start: float, stamps: list[float]) -> float:
    ends = [start, *stamps]
    return statistics.median(b - a for a, b in zip(ends, ends[1:]))


def time_accel(recipe: Recipe) -> tuple[float, float]:
    """Seconds for `Trainer.fit()` of a freshly built trainer (building it is not timed), and its median step."""
    clock = StepEnds()
    trainer = build_trainer(recipe, extra_callbacks=[clock])
    trainer.val_loader = None  # a round times training: the plain loop evaluates nothing either
    devices.synchronize(trainer.device)
    start = time.perf_counter()
    trainer.fit()
    devices.synchronize(trainer.device)
    return time.perf_counter() - start, median_step(start, clock.stamps)


def time_plain(trainer: Trainer, steps: int) -> tuple[float, float]:
    """Seconds for the loop a user would write by hand, over the same model, optimizer, loader and transform,
    and its median step."""
    model, optimizer, loss_fn, device = trainer.module, trainer.optimizer, trainer.task.loss_fn, trainer.device
    scheduler, clip = trainer.scheduler, trainer.cfg.clip_grad_norm
    normalize = trainer.train_transform  # uint8 -> normalised float on the device, as accel does
    applied = {s.name: s for s in trainer.speedups}  # what accel applies here, after skipping what cannot run
    channels_last = "channels_last" in applied
    if channels_last:
        model.to(memory_format=torch.channels_last)
    amp = applied.get("amp")
    autocast = (
        (
            lambda: torch.autocast(
                device.type, dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[amp.cfg.dtype])
            )
        )
        if amp is not None
        else nullcontext
    )
    scaler = torch.amp.GradScaler(device.type) if amp is not None and amp.cfg.dtype == "fp16" else None
    model.train()
    devices.synchronize(device)
    start, done, stamps = time.perf_counter(), 0, []
    while done < steps:
        for inputs, targets in trainer.train_loader:
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            inputs, targets = normalize(inputs, targets)
            if channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            with autocast():
                loss = loss_fn(model(inputs), targets)
            if scaler is None:
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                if clip is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None:
                scheduler.step()
            devices.synchronize(device)
            stamps.append(time.perf_counter())
            done += 1
            if done == steps:
                break
    return time.perf_counter() - start, median_step(start, stamps)


def run_round(recipe: Recipe, plain: Recipe, steps: int, accel_first: bool) -> dict[str, Any]:
    """One accel fit of `recipe` and one plain pass of `plain`, in the given order, each on a freshly built model
    and optimizer; ratios of time per sample.

    Both start fresh: a model that already trained has its optimizer state allocated and its memory touched,
    and would make whichever loop reuses it look faster.
    """
    if accel_first:
        accel_s, accel_step = time_accel(recipe)
        plain_s, plain_step = time_plain(build_trainer(plain), steps)
    else:
        plain_s, plain_step = time_plain(build_trainer(plain), steps)
        accel_s, accel_step = time_accel(recipe)
    per_sample = plain.data.batch_size / recipe.data.batch_size  # 1 unless --plain-set changed the batch size
    return {
        "order": "accel,plain" if accel_first else "plain,accel",
        "accel_s": accel_s,
        "plain_s": plain_s,
        "ratio": accel_s / plain_s * per_sample,
        "accel_step_s": accel_step,
        "plain_step_s": plain_step,
        "step_ratio": accel_step / plain_step * per_sample,
    }


def summarize(rounds: list[dict], samples: int, plain_samples: int) -> dict[str, Any]:
    """Median order-balanced ratio with a bootstrap 95% interval and the range; samples/s of each side."""
    whole, step = paired_ratio(rounds, "ratio"), paired_ratio(rounds, "step_ratio")
    return {
        "ratio_accel_over_plain": whole,
        "step_ratio_accel_over_plain": step,
        "accel_samples_per_s": statistics.median(samples / r["accel_s"] for r in rounds),
        "plain_samples_per_s": statistics.median(plain_samples / r["plain_s"] for r in rounds),
        "verdict": verdict(whole["ci95"]),
        "step_verdict": verdict(step["ci95"]),
    }


def paired_ratio(rounds: list[dict], key: str) -> dict[str, Any]:
    ratios = [math.sqrt(a[key] * b[key]) for a, b in zip(rounds[::2], rounds[1::2])]
    median, ci = bootstrap_median_ci(ratios)
    return {"median": median, "ci95": list(ci), "min": min(ratios), "max": max(ratios)}


def verdict(ci: tuple[float, float]) -> str:
    """`within` or `not within` the target only when the whole interval agrees; noise gives `inconclusive`."""
    if ci[1] <= TARGET:
        return "within"
    if ci[0] > TARGET:
        return "not within"
    return "inconclusive"


def print_table(rounds: list[dict], summary: dict, args: argparse.Namespace) -> None:
    print(f"{'round':>5}  {'order':<12} {'accel s':>9} {'plain s':>9} {'accel/plain':>12} {'median step':>12}")
    for i, r in enumerate(rounds, 1):
        print(
            f"{i:>5}  {r['order']:<12} {r['accel_s']:>9.3f} {r['plain_s']:>9.3f} {r['ratio']:>12.4f} "
            f"{r['step_ratio']:>12.4f}"
        )

    def named(speedups: list[str]) -> str:
        return ", ".join(speedups) or "none"

    sides = (
        f"speed-ups in both loops: {named(summary['speedups_applied'])}"
        if not args.plain_set
        else f"speed-ups: accel {named(summary['speedups_applied'])}, plain {named(summary['plain_speedups'])} "
        f"(plain batch {summary['plain_batch_size']}; ratios of time per sample)"
    )
    print(
        f"\n{summary['model']}, batch {summary['batch_size']}, {args.steps} steps per round, {len(rounds)} rounds, "
        + sides
        + (f" (skipped here: {summary['speedups_skipped']})" if summary["speedups_skipped"] else "")
    )
    print(f"samples/s: accel {summary['accel_samples_per_s']:.1f}, plain {summary['plain_samples_per_s']:.1f}")
    for name, key, said in (
        ("whole rounds", "ratio_accel_over_plain", "verdict"),
        ("median steps", "step_ratio_accel_over_plain", "step_verdict"),
    ):
        ratio = summary[key]
        print(
            f"accel/plain time ratio on {summary['cpu_class']}, {name}: median {ratio['median']:.4f}, "
            f"95% CI [{ratio['ci95'][0]:.4f}, "
            f"{ratio['ci95'][1]:.4f}], range [{ratio['min']:.4f}, {ratio['max']:.4f}]: {summary[said]}"
        )
    print(
        f"(target: accel takes at most {100 * (TARGET - 1):.0f}% longer, the whole 95% interval <= {TARGET}; "
        "inconclusive: run more rounds on a quiet machine)"
    )


def head_commit() -> str | None:
    """The checkout's commit, where this file is in a git checkout."""
    try:
        return git(HERE, "rev-parse", "--short", "HEAD").strip()
    except AccelError:
        return None


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe, plain = make_recipe(args), make_recipe(args, args.plain_set)
    run_round(recipe, plain, args.steps, accel_first=True)  # warm-up: allocator, kernels, caches; discarded
    rounds = [
        run_round(recipe, plain, args.steps, accel_first=i % 2 == 0) for i in range(args.rounds + args.rounds % 2)
    ]
    summary = summarize(rounds, args.steps * recipe.data.batch_size, args.steps * plain.data.batch_size)
    probe, plain_probe = build_trainer(recipe), build_trainer(plain)
    summary |= {
        "speedups_applied": [s.name for s in probe.speedups],
        "speedups_skipped": probe.skipped_speedups,
        "plain_speedups": [s.name for s in plain_probe.speedups],
        "model": recipe.model.name,
        "batch_size": recipe.data.batch_size,
        "plain_batch_size": plain.data.batch_size,
        # the class the figures hold for: one loop's per-step costs differ between CPU classes (parity_by_cpu.py)
        "cpu_class": devices.cpu_class() if probe.device.type == "cpu" else devices.device_name(probe.device),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": head_commit(),
    }
    print_table(rounds, summary, args)
    device = probe.device
    report = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "env": devices.environment(device),
        "target_ratio": TARGET,
        "rounds": rounds,
        **summary,
    }
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
