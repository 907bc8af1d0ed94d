"""What contiguous token batches cost: time per batch of TokenChunks's gather, in one process, interleaved.

  shipped     inputs and targets gathered as separate contiguous int64 tensors (what accel does)
  views       one int64 window sliced into two strided views (accel before: breaks `targets.view(-1)`)
  views+copy  those views copied with `.contiguous()` afterwards (the fix applied in the training loop instead)

Batches are read from a memory-mapped uint16 token file in shuffled order, as a training epoch reads them.

    python benchmarks/token_batch_cost.py --json runs/token-batch-cost.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from accel.data.datasets.text import TokenChunks

SHAPES = [(12, 64), (32, 128), (16, 1024)]  # (batch, context): the small GPT, lm-bytes, lm-bytes-cuda


def views(chunks: TokenChunks, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    starts = np.asarray(indices, dtype=np.int64) * chunks.context
    window = torch.from_numpy(chunks.tokens[starts[:, None] + chunks._offsets].astype(np.int64))
    return window[:, :-1], window[:, 1:]


def views_copied(chunks: TokenChunks, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = views(chunks, indices)
    return inputs.contiguous(), targets.contiguous()


def shipped(chunks: TokenChunks, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(chunks.__getitems__(indices))


VARIANTS = {"shipped": shipped, "views": views, "views+copy": views_copied}


def time_per_batch(fn, chunks: TokenChunks, batches: list[list[int]]) -> float:
    start = time.perf_counter()
    for indices in batches:
        fn(chunks, indices)
    return (time.perf_counter() - start) / len(batches)


def measure(chunks: TokenChunks, batch: int, rounds: int, per_round: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(rounds):
        batches = [rng.integers(0, len(chunks), batch).tolist() for _ in range(per_round)]
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))  # alternate who goes first
        for name in order:
            times[name].append(time_per_batch(VARIANTS[name], chunks, batches))
    return {
        name: {"median_us": statistics.median(t) * 1e6, "min_us": min(t) * 1e6, "max_us": max(t) * 1e6}
        for name, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000_000, help="size of the token file")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--per-round", type=int, default=200, help="batches timed together in a round")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.bin"
        np.random.default_rng(0).integers(0, 50_257, args.tokens, dtype=np.uint16).tofile(path)
        tokens = np.memmap(path, dtype=np.uint16, mode="r")
        for batch, context in SHAPES:
            for fn in VARIANTS.values():  # same values from all three: the comparison is of layout alone
                a, b = fn(TokenChunks(tokens, context), [3, 1])
                assert torch.equal(a, shipped(TokenChunks(tokens, context), [3, 1])[0]) and b.dtype == torch.int64
            figures = measure(TokenChunks(tokens, context), batch, args.rounds, args.per_round, seed=batch)
            results.append({"batch": batch, "context": context, **figures})
    print(
        f"{'batch x context':>16} " + " ".join(f"{name + ' us':>15}" for name in VARIANTS) + f" {'shipped - views':>16}"
    )
    for row in results:
        cells = " ".join(f"{row[name]['median_us']:15.1f}" for name in VARIANTS)
        delta = row["shipped"]["median_us"] - row["views"]["median_us"]
        print(f"{row['batch']:>7} x {row['context']:<6} {cells} {delta:+15.1f}")
    print("medians of", args.rounds, "rounds of", args.per_round, "batches; one thread")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        env = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cpu": platform.processor() or platform.machine(),
        }
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "env": env, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
