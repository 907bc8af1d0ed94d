"""What accel's Trainer runs that a plain loop does not: per-operator counts and self CPU time (torch.profiler) of
one whole run of each side, the same model and loader as `compare_plain_loop.py`, alternating, `--pairs` times.

A time ratio says that accel is slower; this says where: an operator only accel's side calls, or one it calls
more often, is accel's own work. Counts over a run include its once-per-run work (the FLOP count's forward and
backward on a few samples); divide by `--steps` for what each step adds.

python benchmarks/compare_plain_ops.py --model resnet18_cifar --batch-size 128 --steps 6 --threads 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
import compare_plain_loop as compare  # noqa: E402

from accel import devices  # noqa: E402
from accel.train.run import build_trainer  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18_cifar")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps profiled per run")
    parser.add_argument("--pairs", type=int, default=2, help="profiled runs of each side, alternating")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=30, help="operators shown, by the larger self time")
    parser.add_argument("--json", type=Path, default=Path("runs/plain_ops.json"))
    return parser.parse_args(argv)


def profiled(run) -> dict[str, list[float]]:
    """{operator: [calls, self CPU ms]} of one call of `run`."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return {e.key: [e.count, e.self_cpu_time_total / 1e3] for e in prof.key_averages()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = compare.make_recipe(
        compare.parse_args(["--model", args.model, "--batch-size", str(args.batch_size), "--steps", str(args.steps)])
    )
    sides = {
        "accel": lambda: compare.time_accel(recipe),
        "plain": lambda: compare.time_plain(build_trainer(recipe), args.steps),
    }
    for run in sides.values():  # warm-up: allocator, kernel choice, caches
        run()
    runs = {f"{name} {i + 1}": profiled(run) for i in range(args.pairs) for name, run in sides.items()}
    ops = sorted(set().union(*runs.values()), key=lambda op: -max(r.get(op, [0, 0])[1] for r in runs.values()))
    print(f"{'operator':<44}" + "".join(f"{name + ' calls':>14}{'ms':>10}" for name in runs))
    for op in ops[: args.top]:
        print(
            f"{op[:43]:<44}"
            + "".join(f"{r.get(op, [0, 0])[0]:>14}{r.get(op, [0, 0])[1]:>10.1f}" for r in runs.values())
        )
    totals = {name: sum(ms for _, ms in r.values()) for name, r in runs.items()}
    print("self CPU ms: " + ", ".join(f"{name} {ms:.0f}" for name, ms in totals.items()))
    only = sorted(
        {op for name, r in runs.items() if name.startswith("accel") for op in r}
        - set().union(*(r for name, r in runs.items() if name.startswith("plain")))
    )
    print("only on accel's side: " + (", ".join(only) or "nothing"))
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "env": devices.environment(), "runs": runs}
    compare.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
