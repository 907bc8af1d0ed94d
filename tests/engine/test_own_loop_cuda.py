"""accel.Engine in a hand-written loop on a CUDA GPU: fp16 through the loop's own optimizer step with torch's CUDA
GradScaler (step, skip, update, the scale saved and loaded), `eng.compile_step` captured as a CUDA graph, and a
model the loop already wrapped in DDP refused under NCCL (`cuda`-marked: skipped with the reason elsewhere)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import accel
from accel.errors import AccelError
from conftest import assert_captured_step_trains_alike, cuda_only

pytestmark = pytest.mark.cuda


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(F.relu(self.body(x)))


def fresh(lr: float = 1e-2, **optim) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    return model, torch.optim.AdamW(model.parameters(), lr=lr, **optim)


def batch(device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 16, generator=g).to(device), torch.randint(0, 4, (32,), generator=g).to(device)


def fp16_step(eng: accel.Engine, model, optimizer, x, y, factor: float = 1.0) -> float:
    with eng.autocast():
        loss = F.cross_entropy(model(x), y) * factor
    eng.backward(loss)
    eng.clip_gradients(model, optimizer, max_norm=1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


@cuda_only
def test_fp16_on_cuda_steps_skips_updates_and_saves_its_scale(tmp_path):
    fp16 = {"amp": {"dtype": "fp16", "init_scale": 1024.0, "growth_interval": 2}}
    eng = accel.Engine(speedups=fp16, device="cuda")
    model, optimizer = eng.setup(*fresh())
    scaler = eng._core.strategy.precision.scaler
    assert scaler is not None and scaler.is_enabled()
    x, y = batch()
    first = fp16_step(eng, model, optimizer, x, y)
    assert scaler.get_scale() == 1024.0 and eng.steps == 1
    before = [p.detach().clone() for p in model.parameters()]
    fp16_step(eng, model, optimizer, x, y, factor=float("inf"))  # inf gradients: skipped, the scale halved
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 512.0 and eng._core.strategy.precision.skipped_steps == 1
    for _ in range(2):  # growth_interval good steps: the scale grows back
        last = fp16_step(eng, model, optimizer, x, y)
    assert scaler.get_scale() == 1024.0 and last < first
    fp16_step(eng, model, optimizer, x, y, factor=float("nan"))
    assert scaler.get_scale() == 512.0
    state = {"model": model, "optimizer": optimizer}
    eng.save(tmp_path / "ckpt.pt", state)
    eng.close()

    again = accel.Engine(speedups=fp16, device="cuda")
    model2, optimizer2 = again.setup(*fresh())
    again.load(tmp_path / "ckpt.pt", {"model": model2, "optimizer": optimizer2})
    assert again._core.strategy.precision.scaler.get_scale() == 512.0 and again.steps == eng.steps
    for a, b in zip(model.parameters(), model2.parameters()):
        torch.testing.assert_close(b, a)
    assert all(p.is_cuda for p in model2.parameters())
    again.close()


def graph_losses(speedups: dict, steps: int = 8) -> tuple[list[float], list[torch.Tensor], accel.Engine]:
    eng = accel.Engine(speedups=speedups, device="cuda")
    model, optimizer = eng.setup(*fresh())
    step = eng.compile_step(lambda x, y: F.cross_entropy(model(x), y))
    x, y = batch()
    losses = []
    for i in range(steps):
        for group in optimizer.param_groups:  # the loop's own schedule: a captured step must follow it
            group["lr"] = 1e-2 * (1 - i / steps)
        losses.append(step(x, y).item())
    weights = [p.detach().clone() for p in model.parameters()]
    return losses, weights, eng


@cuda_only
@pytest.mark.parametrize("amp", [{}, {"amp": {"dtype": "bf16"}}], ids=["fp32", "bf16"])
def test_compile_step_captured_as_a_cuda_graph_trains_like_the_eager_step(amp):
    eager, eager_weights, plain = graph_losses(amp)
    graphed, graphed_weights, eng = graph_losses({**amp, "cuda_graphs": {"warmup_steps": 3}})
    assert eng._core.skipped_speedups == {}
    assert next(s for s in eng._core.speedups if s.name == "cuda_graphs").metrics() == {"captured": True}
    assert eng.steps == plain.steps == 8
    start = list(fresh()[0].parameters())
    assert_captured_step_trains_alike((eager, eager_weights), (graphed, graphed_weights), start, bool(amp))
    assert graphed[-1] < graphed[0]
    eng.close()
    plain.close()


@cuda_only
def test_a_loop_of_its_own_with_cuda_graphs_but_no_compile_step_is_told_how():
    eng = accel.Engine(speedups={"cuda_graphs": {}}, device="cuda")
    eng.setup(*fresh())
    with pytest.raises(AccelError, match=r"replaces the whole training step.*eng.compile_step\(fn\)"):
        with eng.autocast():
            pass
    eng.close()


@cuda_only
def test_a_model_already_in_ddp_is_refused_under_nccl(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        model, optimizer = fresh()
        wrapped = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[0])
        with pytest.raises(AccelError, match="wrapped in DistributedDataParallel already"):
            accel.Engine(device="cuda").setup(wrapped, optimizer)
    finally:
        del wrapped
        dist.destroy_process_group()
