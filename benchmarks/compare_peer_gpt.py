"""accel against the loop a minimal GPT trainer ships, on that trainer's kind of model file and data.

The model is a user's own file written for such a trainer (tests/compat/models.py's ViewGPT: `forward(idx,
targets)` returns `(logits, loss)` and calls `.view()`), the data a flat uint16 token file pair `train.bin` and
`val.bin` (the bytes of Python's standard library, the layout such trainers' prepare scripts write). The plain
loop is written the way those trainers write theirs: random windows cut from the memory-mapped file each step,
AdamW with decay on matrices only, a cosine schedule set by hand each step, clipping, a loss printed every few
steps, an evaluation and a checkpoint at the end. accel trains the same file through `accel train` (`model:
tests.compat.models:build`, `task: tests.compat.models:loss`, a `token_file` dataset).

Every run is a fresh process, timed from start to exit by this script. Each side runs at two lengths (`--steps
SHORT LONG`): the marginal seconds per step, (T_long - T_short) / (LONG - SHORT), leaves out start-up, the final
evaluation and save; the intercept T_short - SHORT * marginal is what the side pays once. Rounds alternate which
side goes first; each pair of rounds (one of each order) gives the geometric mean of its two ratios, so an order
effect cancels. Prints the table and the median pair ratio plain/accel of seconds per step (> 1: accel faster)
with a bootstrap 95% interval, and the start-up difference; writes JSON.

    python benchmarks/compare_peer_gpt.py --size small --rounds 8   # 4 layers, width 128, context 64, batch 12
    python benchmarks/compare_peer_gpt.py --size lm-bytes --steps 10 40 --rounds 4  # the lm-bytes recipe's size
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parent.parent
SIZES = {  # model and batch of each size; the optimizer settings are those such trainers publish for a CPU
    "small": {"depth": 4, "heads": 4, "width": 128, "context": 64, "batch": 12},
    "lm-bytes": {"depth": 4, "heads": 4, "width": 192, "context": 128, "batch": 32},
}
MODEL_ARGS = ("depth", "heads", "width")
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, CLIP, LOG_EVERY, EVAL_BATCHES = 1e-3, 1e-4, 10, 0.1, (0.9, 0.99), 1.0, 10, 8


def write_tokens(folder: Path, context: int, batch: int) -> None:
    """train.bin: the standard library's .py files as bytes (uint16 ids); val.bin: EVAL_BATCHES batches' worth."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    data = np.frombuffer(b"".join(p.read_bytes() for p in sorted(stdlib.glob("*.py"))), dtype=np.uint8)
    n_val = EVAL_BATCHES * batch * context + 1
    data[:-n_val].astype(np.uint16).tofile(folder / "train.bin")
    data[-n_val:].astype(np.uint16).tofile(folder / "val.bin")


def random_windows(data: np.ndarray, block: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` random windows of the token memory map and the same windows one token on, as such loops cut them."""
    import torch  # here: the comparing process itself never needs torch

    ix = torch.randint(len(data) - block, (batch,))
    x = torch.stack([torch.from_numpy(data[i : i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + block].astype(np.int64)) for i in ix])
    return x, y


def peer_adamw(model: torch.nn.Module, decay_everything: bool = False) -> torch.optim.AdamW:
    """AdamW with decay on matrices only, as those trainers configure it (`decay_everything`: one group, as accel)."""
    import torch

    params = list(model.parameters())
    groups = (
        params
        if decay_everything
        else [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
    )
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)


def plain_main(args: argparse.Namespace) -> None:
    """The plain loop, in its own process (`compare_peer_gpt.py plain ...`)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from tests.compat.models import ViewGPT

    size = SIZES[args.size]
    block, batch = size["context"], size["batch"]
    train_data = np.memmap(args.data / "train.bin", dtype=np.uint16, mode="r")
    val_data = np.memmap(args.data / "val.bin", dtype=np.uint16, mode="r")

    def get_batch(data: np.ndarray):
        return random_windows(data, block, batch)

    def get_lr(it: int) -> float:
        if it < WARMUP:
            return LR * (it + 1) / (WARMUP + 1)
        ratio = (it - WARMUP) / max(args.max_steps - WARMUP, 1)
        return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)

    torch.manual_seed(1337)
    model = ViewGPT(256, block, **{k: size[k] for k in MODEL_ARGS})
    optimizer = peer_adamw(model)
    x, y = get_batch(train_data)
    for it in range(args.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        _, loss = model(x, y)
        x, y = get_batch(train_data)  # the next batch while the graph is still alive, as those loops do
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % LOG_EVERY == 0:
            print(f"iter {it}: loss {loss.item():.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        val_loss = statistics.fmean(model(*get_batch(val_data))[1].item() for _ in range(EVAL_BATCHES))
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": args.max_steps},
        args.out / "ckpt.pt",
    )
    print(json.dumps({"val_loss": val_loss}))


def accel_recipe(size: dict[str, int], data: Path) -> dict[str, Any]:
    """The same model, data and optimizer settings as an accel recipe a user would write."""
    return {
        "name": "peer-gpt",
        "seed": 1337,
        "device": "cpu",
        "model": {"name": "tests.compat.models:build", "args": {k: size[k] for k in MODEL_ARGS}},
        "task": {"name": "tests.compat.models:loss"},
        "data": {
            "dataset": {
                "name": "token_file",
                "path": str(data / "train.bin"),
                "val_path": str(data / "val.bin"),
                "context": size["context"],
                "vocab_size": 256,
            },
            "batch_size": size["batch"],
        },
        "optim": {"name": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY, "betas": list(BETAS)},
        "schedule": {"name": "cosine", "warmup_steps": WARMUP, "min_lr_ratio": MIN_LR / LR},
        "train": {"epochs": 1, "clip_grad_norm": CLIP},
        "log": {"every_steps": LOG_EVERY, "progress": False},
        "checkpoint": {"every_epochs": 1, "keep": 0},
    }


def timed(command: list[str]) -> float:
    """Seconds from starting `command` to its exit; a failure stops the comparison with the run's output."""
    start = time.perf_counter()  # run from the repository root: `tests.compat.models` imports from there
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return seconds


def run_side(side: str, steps: int, work: Path, tag: str, args: argparse.Namespace) -> float:
    out = work / f"{side}-{tag}"
    if side == "plain":
        out.mkdir()
        return timed(
            [
                sys.executable,
                str(Path(__file__)),
                "plain",
                "--size",
                args.size,
                "--data",
                str(work),
                "--max-steps",
                str(steps),
                "--out",
                str(out),
            ]
        )
    return timed(
        [
            sys.executable,
            "-m",
            "accel.cli",
            "train",
            str(work / "recipe.yaml"),
            "--out",
            str(out),
            "--set",
            f"train.max_steps={steps}",
        ]
    )


def run_round(index: int, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Both sides at both lengths; the side that goes first alternates by round."""
    sides = ("accel", "plain") if index % 2 == 0 else ("plain", "accel")
    seconds = {(side, n): run_side(side, n, work, f"{index}-{n}", args) for n in args.steps for side in sides}
    short, long = args.steps
    row: dict[str, Any] = {"order": ",".join(sides)}
    for side in sides:
        step = (seconds[side, long] - seconds[side, short]) / (long - short)
        row |= {
            f"{side}_short_s": seconds[side, short],
            f"{side}_long_s": seconds[side, long],
            f"{side}_step_s": step,
            f"{side}_once_s": seconds[side, short] - short * step,
        }
    # a negative marginal time means noise outweighed the extra steps: no ratio then
    positive = row["plain_step_s"] > 0 and row["accel_step_s"] > 0
    row["ratio"] = row["plain_step_s"] / row["accel_step_s"] if positive else -1.0
    row["startup_diff_s"] = row["accel_once_s"] - row["plain_once_s"]
    return row


def summarize(rounds: list[dict]) -> dict[str, Any]:
    """The median pair ratio and its interval; a pair whose marginal step times are not both positive (the
    machine's noise outweighed the difference between the two lengths) is left out and counted."""
    from accel.bench.stats import bootstrap_median_ci

    pairs = [
        math.sqrt(a["ratio"] * b["ratio"])
        for a, b in zip(rounds[::2], rounds[1::2])
        if a["ratio"] > 0 and b["ratio"] > 0
    ]
    summary = {
        "accel_step_s": statistics.median(r["accel_step_s"] for r in rounds),
        "plain_step_s": statistics.median(r["plain_step_s"] for r in rounds),
        "startup_diff_s": statistics.median(r["startup_diff_s"] for r in rounds),
        "pairs_left_out": len(rounds) // 2 - len(pairs),
    }
    if not pairs:
        return summary | {
            "ratio_plain_over_accel": None,
            "meets_target": None,
            "verdict": "too noisy: no pair had positive step times; lengthen --steps",
        }
    median, (lo, hi) = bootstrap_median_ci(pairs)
    verdict = "accel faster" if lo > 1 else "accel slower" if hi < 1 else "no measurable difference"
    return summary | {
        "ratio_plain_over_accel": {"median": median, "ci95": [lo, hi], "pairs": pairs},
        "verdict": verdict,
        "meets_target": hi >= 1.0,
    }


def print_table(rounds: list[dict], summary: dict, args: argparse.Namespace) -> None:
    print(
        f"{'round':>5}  {'order':<12} {'accel s/step':>12} {'plain s/step':>12} {'plain/accel':>11} "
        f"{'start-up diff s':>15}"
    )
    for i, r in enumerate(rounds, 1):
        print(
            f"{i:>5}  {r['order']:<12} {r['accel_step_s']:>12.4f} {r['plain_step_s']:>12.4f} "
            f"{r['ratio']:>11.3f} {r['startup_diff_s']:>15.2f}"
        )
    print(f"\nsize {args.size} {SIZES[args.size]}, steps {args.steps[0]} and {args.steps[1]}, {len(rounds)} rounds")
    ratio = summary["ratio_plain_over_accel"]
    interval = (
        f"plain/accel median of pairs {ratio['median']:.3f}, 95% CI [{ratio['ci95'][0]:.3f}, {ratio['ci95'][1]:.3f}]"
        if ratio
        else "no ratio"
    )
    print(
        f"seconds per step: accel {summary['accel_step_s']:.4f}, plain {summary['plain_step_s']:.4f}; "
        f"{interval}: {summary['verdict']}"
        + (
            f" ({summary['pairs_left_out']} pair(s) left out: a step time not positive)"
            if summary["pairs_left_out"]
            else ""
        )
    )
    print(f"start-up and the once-per-run work (accel - plain): {summary['startup_diff_s']:+.2f} s")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode",
        nargs="?",
        choices=["compare", "plain"],
        default="compare",
        help="`plain`: one run of the plain loop (used by the comparison itself)",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--steps", type=int, nargs=2, default=[20, 100], metavar=("SHORT", "LONG"))
    parser.add_argument("--rounds", type=int, default=8, help="rounds (rounded up to even: pairs of orders)")
    parser.add_argument("--json", type=Path, default=ROOT / "runs" / "compare-peer-gpt.json")
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--max-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode == "compare" and not 0 < args.steps[0] < args.steps[1]:
        parser.error("--steps SHORT LONG needs 0 < SHORT < LONG")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.mode == "plain":
        plain_main(args)
        return 0
    size = SIZES[args.size]
    with tempfile.TemporaryDirectory(prefix="peer-gpt-") as tmp:
        work = Path(tmp)
        write_tokens(work, size["context"], size["batch"])
        (work / "recipe.yaml").write_text(yaml.safe_dump(accel_recipe(size, work), sort_keys=False))
        rounds = [run_round(i, work, args) for i in range(args.rounds + args.rounds % 2)]
    summary = summarize(rounds)
    print_table(rounds, summary, args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "size": size, "rounds": rounds, **summary}, indent=2
        )
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
