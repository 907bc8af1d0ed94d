"""Per-step time of the minimal trainer's GPT in one process: the plain loop, the plain loop with accel's AdamW
(one group, decay on every parameter), the plain loop fed by accel's own DataLoader, and `accel`'s fit of the same
recipe, rounds alternating their order. Each reading is the median step after the first five.

compare_peer_gpt.py times fresh processes, whose start-up swings by seconds on a shared VM; here the four loops
share one interpreter, so a few percent per step can show (and the two middle loops say which part of accel
a difference would come from).

    python benchmarks/peer_gpt_steps.py --rounds 8 --steps 80 --json benchmarks/results/peer-gpt-steps.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare_peer_gpt as peer  # noqa: E402

from accel.bench.stats import bootstrap_median_ci  # noqa: E402
from accel.callbacks import Callback  # noqa: E402
from accel.config.recipe import load_recipe  # noqa: E402
from accel.train.run import build_trainer  # noqa: E402
from tests.compat.models import ViewGPT  # noqa: E402

SIZE = peer.SIZES["small"]


class StepTimes(Callback):
    def __init__(self):
        self.times = [time.perf_counter()]

    def on_batch_end(self, trainer, info) -> None:
        self.times.append(time.perf_counter())


def median_step(times: list[float]) -> float:
    return statistics.median(b - a for a, b in list(zip(times, times[1:]))[5:])


def accel_fit(recipe: Path, steps: int) -> float:
    spec = load_recipe(recipe)
    spec.train.max_steps = steps
    clock = StepTimes()
    build_trainer(spec, extra_callbacks=[clock]).fit()
    return median_step(clock.times[1:])  # from the first batch's end: the loop's own set-up left out


def plain_loop(work: Path, steps: int, one_group: bool = False, accel_loader: bool = False) -> float:
    block, batch = SIZE["context"], SIZE["batch"]
    data = np.memmap(work / "train.bin", dtype=np.uint16, mode="r")
    torch.manual_seed(1337)
    model = ViewGPT(256, block, **{k: SIZE[k] for k in peer.MODEL_ARGS})
    optimizer = peer.peer_adamw(model, decay_everything=one_group)
    if accel_loader:
        spec = load_recipe(work / "recipe.yaml")
        batches = iter(build_trainer(spec).train_loader)
        next_batch = lambda: next(batches)  # noqa: E731
    else:
        next_batch = lambda: peer.random_windows(data, block, batch)  # noqa: E731
    x, y = next_batch()
    times = [time.perf_counter()]
    for it in range(steps):
        _, loss = model(x, y)
        x, y = next_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), peer.CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % peer.LOG_EVERY == 0:
            loss.item()
        times.append(time.perf_counter())
    return median_step(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--json", type=Path, default=ROOT / "runs" / "peer-gpt-steps.json")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="peer-gpt-steps-") as tmp:
        work = Path(tmp)
        peer.write_tokens(work, SIZE["context"], SIZE["batch"])
        recipe = peer.accel_recipe(SIZE, work) | {"log": {"every_steps": peer.LOG_EVERY, "progress": False}}
        (work / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
        loops = {
            "plain": lambda: plain_loop(work, args.steps),
            "plain, accel's AdamW": lambda: plain_loop(work, args.steps, one_group=True),
            "plain, accel's loader": lambda: plain_loop(work, args.steps, accel_loader=True),
            "accel": lambda: accel_fit(work / "recipe.yaml", args.steps),
        }
        seconds: dict[str, list[float]] = {name: [] for name in loops}
        for r in range(args.rounds):
            for name in list(loops)[:: 1 if r % 2 == 0 else -1]:
                seconds[name].append(loops[name]())
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.4f} s" for k, v in seconds.items()), flush=True)
    summary = {}
    for name, values in seconds.items():
        median, (lo, hi) = bootstrap_median_ci([v / p for v, p in zip(values, seconds["plain"])])
        summary[name] = {"median_step_s": statistics.median(values), "over_plain": [median, lo, hi]}
        print(f"{name:24s} median step {statistics.median(values):.4f} s, / plain {median:.3f} [{lo:.3f}, {hi:.3f}]")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"size": SIZE, "steps": args.steps, "rounds": seconds, "summary": summary}, indent=2)
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
