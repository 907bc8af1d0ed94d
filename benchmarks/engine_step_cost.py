"""What accel.Engine's per-step path costs a hand-written loop, resolved on a noisy machine.

Two wall-clock rounds a few percent apart cannot show 20 us in a step of 10 ms. Here the same step runs in one
process, plain and through the engine, interleaved round after round (each round a few hundred steps of each), and
each side's fastest round is kept: a neighbour slows rounds down, never speeds them up, so the minima differ by
what the engine adds. Two models: a 4x4 linear layer, whose step is almost all Python (what a launch-bound GPU step
looks like to the host), and the examples' GPT (2 layers, width 64; gpt_loop.py's loop: autocast context,
accumulation of 2, `optimizer.step()`). Beside the wall clock, two counts that do not move with the machine: the
Python calls into accel's files per optimizer step, and their self time under cProfile (an upper bound: cProfile
charges every call its own overhead). tests/engine/test_step_cost.py holds the call count.

    python benchmarks/engine_step_cost.py --out benchmarks/results/engine-step-cost.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import platform
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from gpt_model import GPT, GPTConfig  # noqa: E402

import accel  # noqa: E402


def linear_step(engine: bool):
    """One optimizer step of a 4x4 linear layer: nearly all of it is the loop's (and the engine's) Python."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, optimizer, ctx, backward = _through(engine, model, optimizer, accum=1)
    x = torch.randn(2, 4)

    def step():
        with ctx:
            loss = model(x).sum()
        backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def gpt_step(engine: bool):
    """One optimizer step of examples/gpt_loop.py: two micro-batches, an autocast context, clipping."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    model, optimizer, ctx, backward = _through(engine, model, optimizer, accum=2)
    x = torch.randint(0, 256, (16, 64))

    def step():
        for _ in range(2):
            with ctx:
                _, loss = model(x, x)
            backward(loss / 2)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _through(engine: bool, model, optimizer, accum: int):
    if not engine:
        return model, optimizer, contextlib.nullcontext(), lambda loss: loss.backward()
    eng = accel.Engine(device="cpu", grad_accum=accum)
    model, optimizer = eng.setup(model, optimizer)
    return model, optimizer, eng.autocast(), eng.backward


MODELS = {"linear": (linear_step, 500), "gpt": (gpt_step, 20)}  # steps a round


def wall(build, steps: int, rounds: int) -> dict:
    """Each side's fastest round, interleaved (the order flips every round), in microseconds a step."""
    sides = {"plain": build(False), "engine": build(True)}
    for step in sides.values():  # warm: allocator, autograd's first graph, the engine's first step
        for _ in range(5):
            step()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in sorted(sides, reverse=bool(r % 2)):
            start = time.perf_counter()
            for _ in range(steps):
                sides[name]()
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    best = {name: min(values) for name, values in times.items()}
    return {"plain_us": best["plain"], "engine_us": best["engine"], "engine_adds_us": best["engine"] - best["plain"]}


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
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1, help="torch's threads (1: the Python path, not the maths)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "models": {}}
    for name, (build, steps) in MODELS.items():
        engine_step = build(True)
        for _ in range(5):
            engine_step()
        calls, top = accel_calls(engine_step, 50)
        figures = {**wall(build, steps, args.rounds), "accel_calls_per_step": calls, "top_calls": top}
        figures["accel_self_us_cprofile"] = self_time_us(engine_step, steps)
        results["models"][name] = figures
        print(
            f"{name}: plain {figures['plain_us']:.1f} us/step, engine {figures['engine_us']:.1f} "
            f"(+{figures['engine_adds_us']:.1f} us, fastest of {args.rounds} interleaved rounds); "
            f"{calls:.0f} calls into accel a step, {figures['accel_self_us_cprofile']:.1f} us of their self time "
            "under cProfile"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
