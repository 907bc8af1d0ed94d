"""Where does a training step of a recipe go? torch.profiler over a few steps of accel's own loop.

Builds the recipe's trainer (its speed-ups included), runs `--warmup` steps unprofiled (compilation, allocator,
oneDNN/cuDNN kernel choice), then profiles `--steps` steps and prints the ops by self time, per step.

    python scripts/profile_step.py cifar10-resnet18 --set speedups.compile.enabled=false
    python scripts/profile_step.py cifar10-resnet18 --set 'speedups={}'   # fp32 eager
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from accel import devices
from accel.callbacks import Callback
from accel.recipe import load_recipe
from accel.run import build_trainer


class StepProfiler(Callback):
    """Advances the profiler's schedule once per optimizer step; after `sync_debug_after` steps, has CUDA warn
    of every operation that makes the host wait for the GPU (a hidden sync stalls the loop)."""

    def __init__(self, profiler: profile, sync_debug_after: int | None = None):
        self.profiler, self.sync_debug_after = profiler, sync_debug_after

    def on_batch_end(self, trainer, info) -> None:
        if info.optimizer_stepped:
            devices.synchronize(trainer.device)  # a step's GPU work belongs to that step
            self.profiler.step()
            if self.sync_debug_after is not None and trainer.step == self.sync_debug_after:
                torch.cuda.set_sync_debug_mode("warn")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--warmup", type=int, default=2, help="steps before profiling")
    parser.add_argument("--steps", type=int, default=3, help="steps profiled")
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument(
        "--sync-debug",
        action="store_true",
        help="CUDA: warn, with a stack, of each host-device sync in the profiled steps",
    )
    args = parser.parse_args(argv)
    overrides = [
        *args.overrides,
        f"train.max_steps={args.warmup + args.steps}",
        "train.eval_every_epochs=0",
        "log.progress=false",
        "log.tensorboard=false",
    ]
    recipe = load_recipe(args.recipe, overrides)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if recipe.device.startswith("cuda") else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=max(args.warmup - 1, 0), warmup=min(args.warmup, 1), active=args.steps, repeat=1),
    ) as prof:
        trainer = build_trainer(recipe, extra_callbacks=[StepProfiler(prof, args.warmup if args.sync_debug else None)])
        trainer.val_loader = None  # the final evaluation is not part of a step
        trainer.fit()
    # on a GPU, its time first, then the host's (where the CPU blocks: syncs, pinned allocations, launches)
    clocks = ["self_device_time_total", "self_cpu_time_total"][2 - len(activities) :]
    events = prof.key_averages()
    for clock in clocks:
        total_us = sum(getattr(e, clock) for e in events)
        if clock != clocks[0]:
            print()
        print(f"{'op':<48} {'ms/step':>9} {'share':>7}")
        for event in sorted(events, key=lambda e: getattr(e, clock), reverse=True)[: args.rows]:
            spent = getattr(event, clock)
            print(f"{event.key[:48]:<48} {spent / args.steps / 1000:>9.1f} {spent / total_us:>7.1%}")
        print(f"{'total (' + clock.replace('_total', '') + ')':<48} {total_us / args.steps / 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
