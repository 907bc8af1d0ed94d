#!/usr/bin/env python
"""Peak memory and step time of the language-model loss with and without `task.fused_loss`, at a vocabulary where
the logits dominate a step (32,768 tokens by default).

Writes a token file of random ids over the vocabulary (uint16, the `token_file` layout), then runs `accel bench`
on the `lm-bytes` recipe over it with `--vary task.fused_loss=false,true`: each trial a fresh process, the
variants interleaved. Peak memory is the CUDA allocator's peak on a GPU and the process's peak resident set on a
CPU (torch and the data included: compare the variants, not the absolute figures). Evaluation runs at the
training batch size, so its logits do not set the plain loss's peak.

Then, in this process, the step's own tensor memory: the peak of the bytes allocated during one forward + loss +
backward of the same GPT, summed from torch.profiler's allocation events (deterministic on a CPU, and free of
the resident set's torch, data and allocator caching). Prints a table and writes JSON.

    python benchmarks/fused_lm_loss.py --out runs/fused-loss --json benchmarks/results/lm-fused-loss.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accel.models import GPT  # noqa: E402
from accel.tasks import LanguageModel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def write_tokens(path: Path, vocab: int, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.random.default_rng(0).integers(0, vocab, count, dtype=np.uint16).tofile(path)


def step_peak_mb(fused: bool, vocab: int, batch: int) -> float:
    """The most tensor memory one training step of the bench's GPT held at once, above what existed before it."""
    torch.manual_seed(0)
    model = GPT(vocab, context=128, width=192, depth=4, heads=4)
    inputs, targets = torch.randint(0, vocab, (2, batch, 128), generator=torch.Generator().manual_seed(0))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        LanguageModel(fused_loss=fused).loss(model, (inputs, targets)).backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default="runs/fused-loss", help="bench folder; one that holds a finished bench is read, not re-run"
    )
    parser.add_argument("--json", help="also write the summary here")
    parser.add_argument("--vocab", type=int, default=32768, help="vocabulary of the random token ids (<= 65536)")
    parser.add_argument("--batch", type=int, default=32, help="windows per step (of 128 tokens)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    out = Path(args.out)
    tokens = out.with_name(out.name + "-tokens.bin")
    command = [
        sys.executable, "-m", "accel.cli", "bench", "lm-bytes",
        "--set", f"data.dataset={json.dumps({'name': 'token_file', 'path': str(tokens), 'context': 128})}",
        "--set", f"data.dataset.vocab_size={args.vocab}", "--set", "data.dataset.val_fraction=0.02",
        "--set", f"data.batch_size={args.batch}", "--set", f"data.eval_batch_size={args.batch}",
        "--set", f"device={args.device}",
        "--vary", "task.fused_loss=false,true",
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--trials", str(args.trials), "--out", str(out),
    ]  # fmt: skip
    if not (out / "report.json").is_file():
        write_tokens(tokens, args.vocab, 2 * 128 * args.batch * (args.steps + args.warmup) + 200_000)  # + validation
        subprocess.run(command, check=True, cwd=ROOT)
    report = json.loads((out / "report.json").read_text())
    rows = {
        v["name"]: {
            "fused_loss": v["overrides"].get("task.fused_loss"),
            "peak_memory_mb": v["peak_memory_mb"],
            "step_p50_s": v["step_time_p50_s"],
            "tokens_per_s": v["tokens_per_s"],
            "final_loss": v["final_loss"],
        }
        for v in report["variants"]
    }
    plain, fused = (next(r for r in rows.values() if r["fused_loss"] is flag) for flag in (False, True))
    for row in (plain, fused):
        row["step_tensor_peak_mb"] = step_peak_mb(row["fused_loss"], args.vocab, args.batch)
    summary = {
        "command": " ".join(sys.argv),
        "bench_command": " ".join(command),
        "vocab": args.vocab,
        "tokens_per_step": args.batch * 128,
        "variants": rows,
        "peak_ratio": fused["peak_memory_mb"] / plain["peak_memory_mb"],
        "step_tensor_peak_ratio": fused["step_tensor_peak_mb"] / plain["step_tensor_peak_mb"],
        "step_time_ratio": fused["step_p50_s"] / plain["step_p50_s"],
        "env": report.get("env"),
    }
    header = ("fused_loss", "peak MB", "step tensors MB", "step p50 s", "tokens/s", "final loss")
    print("".join(f"{name:>{width}}" for name, width in zip(header, (10, 10, 17, 12, 10, 12))))
    for row in (plain, fused):
        print(
            f"{str(row['fused_loss']):>10}{row['peak_memory_mb']:>10.0f}{row['step_tensor_peak_mb']:>17.0f}"
            f"{row['step_p50_s']:>12.3f}{row['tokens_per_s']:>10.0f}{row['final_loss']:>12.4f}"
        )
    print(
        f"fused/plain: peak {summary['peak_ratio']:.2f}x, step tensors {summary['step_tensor_peak_ratio']:.2f}x, "
        f"step time {summary['step_time_ratio']:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
