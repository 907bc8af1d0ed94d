"""Where a compile's seconds go: inductor's one-time start in a process vs compiling the model itself.

Trains the LM recipe's GPT (width 192, 4 heads, context 128, batch 32) for two steps, compiled whole or block by
block (regional), in this fresh process, inductor's caches off. With `--warm`, a small unrelated model is compiled
and trained one step first, so imports, the compile workers and the C++ toolchain's first builds are paid before
the clock starts: what is left is the model's own compilation. Run each case in its own process:

    for mode in whole regional; do for w in "" --warm; do python benchmarks/compile_cost.py $mode $w; done; done
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")  # before torch: every case compiles from nothing

import torch
import torch.nn.functional as F

from accel.models.gpt import GPT
from accel.speedups.compile import Compile, apply_compile, compile_blocks


def step(model: torch.nn.Module, tokens: torch.Tensor) -> None:
    logits = model(tokens)
    F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()


def warm_toolchain(backend: str) -> float:
    start = time.perf_counter()
    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    tiny = torch.compile(tiny, backend=backend)
    tiny(torch.randn(4, 8, requires_grad=True)).sum().backward()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["whole", "regional"])
    parser.add_argument("--warm", action="store_true", help="start inductor on a small model first, untimed")
    parser.add_argument("--depth", type=int, default=4, help="transformer blocks (the recipe has 4)")
    parser.add_argument("--backend", default="inductor", help="dynamo backend (aot_eager: a quick check)")
    args = parser.parse_args(argv)
    warm_s = warm_toolchain(args.backend) if args.warm else 0.0
    torch.manual_seed(0)
    model, tokens = GPT(256, 128, 192, args.depth, 4), torch.randint(0, 256, (32, 128))
    cfg = Compile.Config(backend=args.backend, regional=args.mode == "regional")
    if cfg.regional:
        compile_blocks(model, cfg)  # what the speed-up does: one class of block, compiled once
    else:
        model = apply_compile(model, cfg)
    start = time.perf_counter()
    step(model, tokens)
    first = time.perf_counter()
    step(model, tokens)
    print(
        f"{args.mode}, {args.depth} blocks, {'warm' if args.warm else 'cold'} toolchain"
        f"{f' (warming took {warm_s:.1f} s)' if args.warm else ''}: first step {first - start:.1f} s, "
        f"second {time.perf_counter() - first:.2f} s"
    )


if __name__ == "__main__":
    main()
