"""What accel.Engine's per-step path costs a hand-written loop, resolved on a noisy machine.

Two wall-clock rounds a few percent apart cannot show 20 us in a step of 10 ms. Here one model and one optimizer
are stepped both ways in one process, plainly and through the engine's stand-ins for them, one step of each in
turn (the order flips every pair), and the figure is the median of the pairs' differences: a neighbour's stall
lands in one step of a pair and leaves the median alone, the machine's drift cancels within a pair, and a shared
model leaves no difference of memory placement between the sides (two instances of the same model differ by
10-30 us a step on their own). The accel code runs between the model's operations, with cold caches, as it
does in a real loop: a call costs there 2-3 times what a tight timing loop says. Three models: a 4x4 linear layer,
whose step is almost all Python, the examples' GPT at a tiny size (1 layer of width 8: gpt_loop.py's very path,
an autocast context, two micro-batches, clipping, `optimizer.step()`, where the maths vanishes as beside a
launch-bound GPU step), and that GPT at its own size (2 layers, width 64). Beside the wall clock, two counts that
do not move with the machine: the Python calls into accel's files per optimizer step, and their self time under
cProfile (an upper bound: cProfile charges every call its own overhead). tests/engine/test_step_cost.py holds
the call count.

    python benchmarks/engine_step_cost.py --out benchmarks/results/engine-step-cost.json
    python benchmarks/engine_step_cost.py --device cuda --models gpt-tiny gpt   # on a GPU: each step synchronised

On a GPU each timed step ends with a synchronisation, as the examples' loops end theirs with `loss.item()`: where
the step is launch-bound, the engine's Python adds to it in full; where the GPU is the bottleneck, it hides.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import platform
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from gpt_model import GPT, GPTConfig  # noqa: E402

import accel  # noqa: E402


def linear_steps(device: str = "cpu") -> dict[str, Callable[[], None]]:
    """One optimizer step of a 4x4 linear layer, plain and through the engine: nearly all of it is Python."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2, 4, device=device)

    def step(model, optimizer, ctx, backward):
        def one():
            with ctx:
                loss = model(x).sum()
            backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return one

    return {side: step(*loop) for side, loop in _both(model, optimizer, 1, device).items()}


def gpt_steps(config: GPTConfig | None = None, batch: int = 16, device: str = "cpu") -> dict[str, Callable[[], None]]:
    """One optimizer step of examples/gpt_loop.py, plain and through the engine: two micro-batches, an autocast
    context, clipping."""
    torch.manual_seed(0)
    config = config or GPTConfig(block_size=64)
    model = GPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    x = torch.randint(0, 256, (batch, config.block_size), device=device)

    def step(loop_model, optimizer, ctx, backward):
        def one():
            for _ in range(2):
                with ctx:
                    _, loss = loop_model(x, x)
                backward(loss / 2)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return one

    return {side: step(*loop) for side, loop in _both(model, optimizer, 2, device).items()}


def _both(model, optimizer, accum: int, device: str) -> dict[str, tuple]:
    """The loop's (model, optimizer, context, backward), plain and through an engine, over the same objects."""
    eng = accel.Engine(device=device, grad_accum=accum)
    engine_model, engine_optimizer = eng.setup(model, optimizer)
    return {
        "plain": (model, optimizer, contextlib.nullcontext(), lambda loss: loss.backward()),
        "engine": (engine_model, engine_optimizer, eng.autocast(), eng.backward),
    }


def tiny_gpt_steps(device: str = "cpu") -> dict[str, Callable[[], None]]:
    """The GPT example's step, the very same path, at a size where the maths vanishes (1 layer of width 8, 2 x 8
    tokens): the engine's cost on that path shows in the wall clock as it would beside a launch-bound GPU step."""
    return gpt_steps(GPTConfig(block_size=8, n_layer=1, n_head=1, n_embd=8), batch=2, device=device)


MODELS = {"linear": (linear_steps, 20000), "gpt-tiny": (tiny_gpt_steps, 3000), "gpt": (gpt_steps, 300)}  # pairs


def synchronised(steps: dict[str, Callable[[], None]]) -> dict[str, Callable[[], None]]:
    """Each step ending when the GPU's work has: what a loop's `loss.item()` makes of it."""

    def ending(step):
        def one():
            step()
            torch.cuda.synchronize()

        return one

    return {side: ending(step) for side, step in steps.items()}


def paired(steps: dict[str, Callable[[], None]], pairs: int) -> dict:
    """The median of (engine step - plain step) over `pairs` pairs, one step of each in turn (the order flips every
    pair), and each side's median step, in microseconds."""
    plain, engine = steps["plain"], steps["engine"]
    for _ in range(5):  # warm: allocator, autograd's first graph, the engine's first step
        plain(), engine()
    clock, added, times = time.perf_counter_ns, [], {"plain": [], "engine": []}
    for i in range(pairs):
        order = ("plain", "engine") if i % 2 else ("engine", "plain")
        took = {}
        for side in order:
            start = clock()
            steps[side]()
            took[side] = clock() - start
        added.append(took["engine"] - took["plain"])
        for side in took:
            times[side].append(took[side])
    return {
        "plain_us": statistics.median(times["plain"]) / 1e3,
        "engine_us": statistics.median(times["engine"]) / 1e3,
        "engine_adds_us": statistics.median(added) / 1e3,
        "pairs": pairs,
    }


def accel_calls(step, steps: int) -> tuple[float, dict[str, float]]:
    """Python calls into accel's files per step (deterministic), and the most frequent."""
    calls: Counter = Counter()

    def count(frame, event, arg):
        if event == "call" and "/accel/" in frame.f_code.co_filename:
            calls[f"{frame.f_code.co_filename.split('/accel/')[1]}:{frame.f_code.co_name}"] += 1

    sys.setprofile(count)
    try:
        for _ in range(steps):
            step()
    finally:
        sys.setprofile(None)
    return sum(calls.values()) / steps, {name: n / steps for name, n in calls.most_common(10)}


def self_time_us(step, steps: int) -> float:
    """accel's own functions' self time a step under cProfile, in microseconds (an upper bound)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(steps):
        step()
    profile.disable()
    stats = pstats.Stats(profile).stats
    return sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if "/accel/" in path) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="more (or fewer) pairs than each model's default")
    parser.add_argument("--threads", type=int, default=1, help="torch's threads (1: the Python path, not the maths)")
    parser.add_argument("--device", default="cpu", help="where the models step (cuda: each step synchronised)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = args.device
    results = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "models": {}}
    results["device"] = torch.cuda.get_device_name() if device.startswith("cuda") else device
    for name in args.models:
        build, pairs = MODELS[name]
        engine_step = build(device=device)["engine"]
        for _ in range(5):
            engine_step()
        calls, top = accel_calls(engine_step, 50)
        both = build(device=device)
        both = synchronised(both) if device.startswith("cuda") else both
        figures = {**paired(both, max(1, int(pairs * args.scale))), "accel_calls_per_step": calls, "top_calls": top}
        figures["accel_self_us_cprofile"] = self_time_us(engine_step, 20)
        results["models"][name] = figures
        print(
            f"{name}: plain {figures['plain_us']:.1f} us/step, engine {figures['engine_us']:.1f}; the engine adds "
            f"{figures['engine_adds_us']:.1f} us (median of {figures['pairs']} paired steps); {calls:.0f} calls into "
            f"accel a step, {figures['accel_self_us_cprofile']:.1f} us of their self time under cProfile"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
