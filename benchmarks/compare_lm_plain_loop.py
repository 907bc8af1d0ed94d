"""accel vs a plain hand-written loop on the language-model recipe: same model, same data, same settings.

Each round trains the recipe twice in this one process, once with `accel` (run_recipe, as `accel train` does)
and once with the loop below (the order alternates by round), and compares the final validation loss (target:
within 2%) and training tokens/s (target: within 3%). The plain loop builds the same model from the same seed,
shuffles the same training windows, uses the same optimizer, schedule, clipping and autocast, and evaluates on
the same held-out windows; only the loop is its own.

    python benchmarks/compare_lm_plain_loop.py                           # the whole recipe, ~2 x 4-16 min
    python benchmarks/compare_lm_plain_loop.py --set train.max_steps=20  # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from accel import devices
from accel.config.recipe import Recipe, load_recipe
from accel.models import build_model
from accel.optimizers.builders import build_optimizer, build_scheduler
from accel.registry import DATASETS
from accel.train.run import run_recipe

ROOT = Path(__file__).resolve().parent.parent
LOSS_TARGET, SPEED_TARGET = 0.02, 0.03


def plain_loop(recipe: Recipe) -> dict[str, Any]:
    """The loop an expert writes by hand for this recipe, on a CPU."""
    splits = DATASETS.get(recipe.data.dataset.name).build(recipe.data.dataset, recipe.seed)
    torch.manual_seed(recipe.seed)
    model = build_model(recipe.model, **splits.model_args())
    optimizer = build_optimizer(recipe.optim, model)
    batch, train = recipe.data.batch_size, splits.train
    per_epoch = len(train) // batch
    total = recipe.train.max_steps or per_epoch * recipe.train.epochs
    scheduler = build_scheduler(recipe.schedule, optimizer, total_steps=total, steps_per_epoch=per_epoch)
    amp = recipe.speedups.get("amp")
    bf16 = amp is not None and amp.enabled and devices.supports_bf16(torch.device("cpu"))
    autocast = (lambda: torch.autocast("cpu", torch.bfloat16)) if bf16 else nullcontext
    generator = torch.Generator().manual_seed(recipe.seed)
    step, train_s, tokens, model_losses = 0, 0.0, 0, []
    while step < total:
        order = torch.randperm(len(train), generator=generator)
        for i in range(per_epoch):
            if step == total:
                break
            start = time.perf_counter()
            inputs, targets = train.__getitems__(order[i * batch : (i + 1) * batch].tolist())
            with autocast():
                loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            loss.backward()
            if recipe.train.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.train.clip_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            model_losses.append(loss.detach())
            train_s += time.perf_counter() - start
            tokens += targets.numel()
            step += 1
    return {
        "val_loss": evaluate(model, splits.val, recipe.data.eval_batch_size or batch, autocast),
        "tokens_per_s": tokens / train_s,
        "train_s": train_s,
        "steps": step,
        "bf16": bf16,
    }


@torch.inference_mode()
def evaluate(model, val, batch: int, autocast) -> float:
    model.eval()
    loss_sum, count = 0.0, 0
    for start in range(0, len(val), batch):
        inputs, targets = val.__getitems__(list(range(start, min(start + batch, len(val)))))
        with autocast():
            logits = model(inputs)
        loss_sum += F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum").item()
        count += targets.numel()
    return loss_sum / count


def accel_run(recipe: Recipe) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        summary = run_recipe(recipe, out=Path(out) / "run")
    return {
        "val_loss": summary["metrics"]["val_loss"],
        "tokens_per_s": summary["tokens_per_s"],
        "train_s": summary["train_s"],
        "steps": summary["steps"],
        "skipped": summary["skipped_speedups"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default="lm-bytes")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each training both loops once")
    parser.add_argument("--json", type=Path, default=Path("runs/compare_lm_plain_loop.json"))
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe, ["log.progress=false", "log.tensorboard=false", *args.overrides])
    rounds = []
    for i in range(args.rounds):
        first, second = (accel_run, plain_loop) if i % 2 == 0 else (plain_loop, accel_run)
        results = {fn.__name__: fn(recipe) for fn in (first, second)}
        rounds.append({"order": f"{first.__name__},{second.__name__}", **results})
        print(json.dumps(rounds[-1]), flush=True)
    accel = {k: _geomean([r["accel_run"][k] for r in rounds]) for k in ("val_loss", "tokens_per_s")}
    plain = {k: _geomean([r["plain_loop"][k] for r in rounds]) for k in ("val_loss", "tokens_per_s")}
    loss_gap = accel["val_loss"] / plain["val_loss"] - 1
    speed_gap = accel["tokens_per_s"] / plain["tokens_per_s"] - 1
    verdict = {
        "val_loss": "within" if abs(loss_gap) <= LOSS_TARGET else "not within",
        "tokens_per_s": "within" if speed_gap >= -SPEED_TARGET else "not within",
    }
    print(
        f"val loss: accel {accel['val_loss']:.4f}, plain {plain['val_loss']:.4f} ({100 * loss_gap:+.2f}%, "
        f"{verdict['val_loss']} {100 * LOSS_TARGET:.0f}%)"
    )
    print(
        f"tokens/s: accel {accel['tokens_per_s']:.0f}, plain {plain['tokens_per_s']:.0f} ({100 * speed_gap:+.2f}%, "
        f"{verdict['tokens_per_s']} {100 * SPEED_TARGET:.0f}%)"
    )
    report = {
        "recipe": str(args.recipe),
        "overrides": args.overrides,
        "env": devices.environment(torch.device("cpu")),
        "rounds": rounds,
        "accel": accel,
        "plain": plain,
        "val_loss_gap": loss_gap,
        "tokens_per_s_gap": speed_gap,
        "verdict": verdict,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


if __name__ == "__main__":
    sys.exit(main())
