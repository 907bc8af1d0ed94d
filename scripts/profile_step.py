"""Where does a training step of a recipe go? torch.profiler over a few steps of accel's own loop.

Builds the recipe's trainer (its speed-ups included), runs `--warmup` steps unprofiled (compilation, allocator,
oneDNN/cuDNN kernel choice), then profiles `--steps` steps and prints the ops by self time, per step.

    python scripts/profile_step.py recipes/cifar10-resnet18.yaml --set speedups.compile.enabled=false
    python scripts/profile_step.py recipes/cifar10-resnet18.yaml --set 'speedups={}'   # fp32 eager
"""
from __future__ import annotations

import argparse
import sys

from torch.profiler import ProfilerActivity, profile, schedule

from accel import devices
from accel.callbacks import Callback
from accel.recipe import load_recipe
from accel.run import build_trainer


class StepProfiler(Callback):
    """Advances the profiler's schedule once per optimizer step."""

    def __init__(self, profiler: profile):
        self.profiler = profiler

    def on_batch_end(self, trainer, info) -> None:
        if info.optimizer_stepped:
            devices.synchronize(trainer.device)  # a step's GPU work belongs to that step
            self.profiler.step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--warmup", type=int, default=2, help="steps before profiling")
    parser.add_argument("--steps", type=int, default=3, help="steps profiled")
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args(argv)
    overrides = [*args.overrides, f"train.max_steps={args.warmup + args.steps}", "train.eval_every_epochs=0",
                 "log.progress=false", "log.tensorboard=false"]
    recipe = load_recipe(args.recipe, overrides)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if recipe.device.startswith("cuda") else [])
    with profile(activities=activities, schedule=schedule(
            wait=max(args.warmup - 1, 0), warmup=min(args.warmup, 1), active=args.steps, repeat=1)) as prof:
        trainer = build_trainer(recipe, extra_callbacks=[StepProfiler(prof)])
        trainer.val_loader = None  # the final evaluation is not part of a step
        trainer.fit()
    clock = "self_device_time_total" if len(activities) > 1 else "self_cpu_time_total"  # on a GPU, its time
    events = prof.key_averages()
    total_us = sum(getattr(e, clock) for e in events)
    print(f"{'op':<48} {'ms/step':>9} {'share':>7}")
    for event in sorted(events, key=lambda e: getattr(e, clock), reverse=True)[: args.rows]:
        spent = getattr(event, clock)
        print(f"{event.key[:48]:<48} {spent / args.steps / 1000:>9.1f} {spent / total_us:>7.1%}")
    print(f"{'total (' + clock.replace('_total', '') + ')':<48} {total_us / args.steps / 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
