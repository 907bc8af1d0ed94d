"""A hand-written loop under torchrun (two processes, gloo on CPU): ranks that sample the same batches are said,
`eng.seed_everything` seeds each rank apart, and `eng.print` prints once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from accel.engine.ranks import checksum, drew_the_same, same_as
from conftest import ROOT

# nanoGPT's way: every rank seeds the same and samples its own batches; `seeded` seeds through the engine instead
LOOP = """
import sys, torch, accel
from torch import nn

eng = accel.Engine(device="cpu")
if sys.argv[1] == "seeded":
    eng.seed_everything(1337)
else:
    torch.manual_seed(1337)
model = nn.Linear(8, 2)
model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
print(f"rank {eng.world.rank} starts from {float(model.weight.sum()):.6f}", flush=True)
for step in range(3):
    x = torch.randn(4, 8)
    eng.backward(model(x).square().mean())
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
eng.print("trained", flush=True)
"""


def _two_ranks(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), how]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_ranks_that_draw_the_same_batches_are_said_once_and_seeding_per_rank_draws_apart(tmp_path):
    same = _two_ranks(tmp_path, "same")
    assert same.stderr.count("trained on the same first batch") == 1, same.stderr[-3000:]  # rank 0 says it
    assert "eng.seed_everything(S) in place of torch.manual_seed(S)" in same.stderr
    apart = _two_ranks(tmp_path, "seeded")
    assert "trained on the same first batch" not in apart.stderr, apart.stderr[-3000:]
    starts = re.findall(r"starts from (-?\d+\.\d{6})", apart.stdout)  # not by line: two ranks' prints can interleave
    assert len(starts) == 2 and len(set(starts)) == 1, apart.stdout  # seeded apart, yet DDP starts both from rank 0's
    assert apart.stdout.count("trained") == 1  # eng.print: rank 0 only


def test_a_batchs_checksum_tells_batches_apart_and_ranks_that_match():
    batch = torch.arange(64.0).reshape(8, 8)
    assert torch.equal(checksum(batch), checksum(batch.clone()))
    assert not torch.equal(checksum(batch), checksum(batch.flip(0)))  # the same samples in another order
    assert not torch.equal(checksum(batch), checksum(batch + 1))
    assert checksum(torch.randint(0, 50, (512, 1024))).shape == (2,)  # a large batch: an even sample of it
    nan = float("nan")
    assert same_as([[1.0, 2.0], [1.0, 2.0], [3.0, 2.0]], 0) == [1]
    assert same_as([[1.0, 2.0], [3.0, 4.0]], 0) == [] and same_as([[nan, nan], [nan, nan]], 0) == []
    assert drew_the_same([1, 3]).startswith("rank 0 and rank(s) 1, 3 trained on the same first batch")
