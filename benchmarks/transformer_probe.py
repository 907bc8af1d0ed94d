#!/usr/bin/env python
"""Training speed of a GPT-2-small-shaped transformer in plain PyTorch, per precision, attention kernel and compile.

A reference for accel's language-model path: what a hand-written loop reaches on this device with each
setting, as tokens/s and MFU. FLOPs per token follow the usual accounting, 6 x parameters (forward and
backward of every weight) plus 12 x layers x width x context for attention scores and values (causal masking
is not subtracted, as in PaLM's MFU). MFU is given against the measured bf16 matmul rate when
`--peak-tflops` is passed, and samples are random tokens: this measures speed, not learning.

Variants run one after another in one process, each on a fresh model and fused AdamW, with `--warmup` untimed
steps (compilation happens there) and the median of `--steps` timed steps, the device synchronised per step.

    python benchmarks/transformer_probe.py --device cuda --json runs/transformer.json
    python benchmarks/transformer_probe.py --device cpu --layers 2 --width 64 --heads 2 --context 64 --batch 4 \
        --variants fp32,bf16 --steps 3 --warmup 1                                  # a quick check anywhere
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from accel import devices  # noqa: E402

VARIANTS = ["fp32", "tf32", "bf16", "bf16+math", "bf16+efficient", "bf16+flash", "bf16+cudnn", "bf16+compile"]


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).transpose(1, 3).unbind(2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, layers: int, width: int, heads: int):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2
        for table in (self.tokens, self.positions):  # GPT-2's scale: unit-variance logits would start at loss ~80
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def flops_per_token(model: GPT, args) -> float:
    params = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    return 6 * params + 12 * args.layers * args.width * args.context


def attention_kernel(name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "math": SDPBackend.MATH,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[name]
    return sdpa_kernel([backend])


def run_variant(variant: str, args, device: torch.device) -> dict:
    precision, _, extra = variant.partition("+")
    torch.manual_seed(0)
    model = GPT(args.vocab, args.context, args.layers, args.width, args.heads).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type in ("cuda", "cpu"))
    step_model = torch.compile(model) if extra == "compile" else model
    tokens = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    autocast = torch.autocast(device.type, torch.bfloat16) if precision == "bf16" else nullcontext()
    times = []
    with ExitStack() as stack:
        if extra in ("math", "efficient", "flash", "cudnn"):
            stack.enter_context(attention_kernel(extra))
        for _ in range(args.warmup + args.steps):
            devices.synchronize(device)
            start = time.perf_counter()
            with autocast:
                loss = F.cross_entropy(step_model(inputs).flatten(0, 1).float(), targets.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            devices.synchronize(device)
            times.append(time.perf_counter() - start)
    torch.backends.cuda.matmul.allow_tf32 = False
    step_s = statistics.median(times[args.warmup :])
    tokens_per_s = args.batch * args.context / step_s
    achieved = flops_per_token(model, args) * tokens_per_s / 1e12
    return {
        "variant": variant,
        "step_s": step_s,
        "tokens_per_s": tokens_per_s,
        "tflops": achieved,
        "mfu": achieved / args.peak_tflops if args.peak_tflops else None,
        "warmup_s": sum(times[: args.warmup]),
        "loss": float(loss.detach()),
        "peak_memory_mb": devices.peak_memory_mb(device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--variants", type=lambda s: s.split(","), default=VARIANTS, help=", ".join(VARIANTS))
    for name, default in (
        ("layers", 12),
        ("width", 768),
        ("heads", 12),
        ("context", 1024),
        ("batch", 16),
        ("vocab", 50304),
        ("steps", 10),
        ("warmup", 3),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's bf16 matmul rate, for MFU")
    parser.add_argument("--json", type=Path, default=Path("runs/transformer_probe.json"))
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    device = devices.resolve_device(args.device)
    rows = []
    for variant in args.variants:
        devices.reset_peak_memory(device)
        try:
            rows.append(run_variant(variant, args, device))
        except Exception as err:  # a kernel this device lacks (flash on old GPUs, cudnn attention) is a row
            rows.append({"variant": variant, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"})
        row = rows[-1]
        if "error" in row:
            print(f"{variant:16} error: {row['error']}")
        else:
            mfu = f"{100 * row['mfu']:5.1f}%" if row["mfu"] else "    -"
            print(
                f"{variant:16} {row['tokens_per_s']:12.0f} tokens/s {row['tflops']:8.1f} TFLOP/s  MFU {mfu}  "
                f"warm-up {row['warmup_s']:.1f} s"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "rows": rows,
                "env": devices.environment(device),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
