"""A GPT trained by a hand-written loop through accel.Engine: plain/gpt_loop.py with 5 lines changed (import,
Engine, setup, the autocast context, backward) and one added (`eng.log` of the validation loss, which accel's
bench and tune read). Speed-ups by the script, or from outside it:

    python examples/gpt_loop.py --steps 200 --bf16
    ACCEL_SET="speedups.compile.enabled=true" python examples/gpt_loop.py
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

import accel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # gpt_model.py
from gpt_model import GPT, GPTConfig, prepare_bytes  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="runs/gpt-bytes")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--accum", type=int, default=2)
parser.add_argument("--block", type=int, default=64)
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--eval-every", type=int, default=50)
parser.add_argument("--device", default="cpu")
parser.add_argument("--save", default=None, help="write the weights here at the end")
args = parser.parse_args()

torch.manual_seed(1337)
train_data, val_data = prepare_bytes(args.data)


def get_batch(split):
    data = train_data if split == "train" else val_data
    ix = torch.randint(len(data) - args.block - 1, (args.batch,))
    x = torch.stack([torch.from_numpy(data[i : i + args.block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + args.block].astype(np.int64)) for i in ix])
    return x.to(args.device), y.to(args.device)


def lr_at(step):  # linear warm-up, then cosine decay to a tenth
    warmup = max(1, args.steps // 10)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, args.steps - warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


model = GPT(GPTConfig(block_size=args.block)).to(args.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}} if args.bf16 else {}, grad_accum=args.accum, device=args.device)
model, optimizer = eng.setup(model, optimizer)
ctx = eng.autocast()


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = []
    for _ in range(8):
        x, y = get_batch("val")
        with ctx:
            _, loss = model(x, y)
        losses.append(loss.item())
    model.train()
    eng.log({"val_loss": sum(losses) / len(losses)})  # read by `accel bench --target`, `accel tune --objective time`
    return sum(losses) / len(losses)


x, y = get_batch("train")
start = time.perf_counter()
for step in range(args.steps):
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step)
    if step % args.eval_every == 0 or step == args.steps - 1:
        print(f"step {step}: val loss {estimate_loss():.4f}", flush=True)
    for _ in range(args.accum):
        with ctx:
            _, loss = model(x, y)
            loss = loss / args.accum
        x, y = get_batch("train")
        eng.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: train loss {loss.item() * args.accum:.4f}", flush=True)
if args.save:
    torch.save({"model": model.state_dict(), "config": model.config}, args.save)
print(f"{args.steps} steps in {time.perf_counter() - start:.2f} s")
