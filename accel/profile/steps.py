"""Profile a recipe's training steps: its trainer as `accel train` builds it (speed-ups included), `warmup` steps
unprofiled (compilation, the allocator, oneDNN/cuDNN kernel choice), then `steps` profiled."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from .. import devices
from ..callbacks import Callback
from ..errors import AccelError
from ..recipe import Recipe


@dataclass
class Profiled:
    profiler: profile
    steps: int
    device: bool  # whether the device's own time was recorded (CUDA), besides the host's


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


def step_overrides(warmup: int, steps: int) -> list[str]:
    """What profiling changes in the recipe: exactly warmup + steps optimizer steps, nothing written."""
    if steps < 1 or warmup < 0:
        raise AccelError(f"need --steps >= 1 and --warmup >= 0; got {steps} and {warmup}.")
    return [
        f"train.max_steps={warmup + steps}",
        "train.eval_every_epochs=0",
        "log.progress=false",
        "log.tensorboard=false",
    ]


def profile_recipe(recipe: Recipe, warmup: int, steps: int, sync_debug: bool = False) -> Profiled:
    """Run the recipe (given `step_overrides`) under torch.profiler; the profiler holds the profiled steps."""
    from ..run import build_trainer

    cuda = recipe.device.startswith("cuda")
    if sync_debug and not cuda:
        raise AccelError("--sync-debug needs CUDA: it reports host-device syncs, and this recipe runs on the CPU.")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plan = schedule(wait=max(warmup - 1, 0), warmup=min(warmup, 1), active=steps, repeat=1)
    with profile(activities=activities, schedule=plan) as profiler:
        trainer = build_trainer(recipe, extra_callbacks=[StepProfiler(profiler, warmup if sync_debug else None)])
        trainer.val_loader = None  # the final evaluation is not part of a step
        trainer.fit()
    return Profiled(profiler, steps, device=cuda)
