"""amp: bf16 autocast on CPU, and the fp16 GradScaler path run for real with torch's CPU GradScaler."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from accel import devices
from accel.errors import SpeedupUnavailable
from accel.strategy import precision
from conftest import cuda_only


def params(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.module.parameters()]


def output_dtypes(trainer) -> set[torch.dtype]:
    """Fit `trainer`, recording the output dtype of every convolution and linear layer."""
    seen: set[torch.dtype] = set()
    for module in trainer.module.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
    trainer.fit()
    return seen


def test_bf16_autocast_runs_convolutions_and_matmuls_in_bf16(make_trainer):
    assert output_dtypes(make_trainer({"amp": {"dtype": "bf16"}})) == {torch.bfloat16}
    assert output_dtypes(make_trainer({})) == {torch.float32}


def test_bf16_owns_no_step_and_keeps_no_state(make_trainer):
    trainer = make_trainer({"amp": {}})
    speedup = trainer.speedups[0]
    assert trainer.strategy.precision is speedup.precision() and not hasattr(speedup.precision(), "scaler")
    trainer.fit()
    assert speedup.state_dict() == {} and speedup.metrics() == {}


def test_fp16_is_skipped_on_cpu_with_a_reason_or_refused_in_strict_mode(make_trainer):
    trainer = make_trainer({"amp": {"dtype": "fp16"}})
    assert trainer.speedups == [] and "CUDA" in trainer.skipped_speedups["amp"]
    with pytest.raises(SpeedupUnavailable, match="fp16 needs a GradScaler"):
        make_trainer({"amp": {"dtype": "fp16"}}, strict=True)


def test_bf16_is_skipped_on_a_cpu_that_only_emulates_it(make_trainer, monkeypatch):
    monkeypatch.delenv("ACCEL_CPU_BF16")
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx2", "fma"})  # a 2-core AVX2 EPYC: 13x slower in bf16
    devices.cpu_has_native_bf16.cache_clear()
    try:
        trainer = make_trainer({"amp": {"dtype": "bf16"}})
        assert trainer.speedups == [] and "no native bf16" in trainer.skipped_speedups["amp"]
        monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
        devices.cpu_has_native_bf16.cache_clear()
        assert [s.name for s in make_trainer({"amp": {"dtype": "bf16"}}).speedups] == ["amp"]
    finally:
        devices.cpu_has_native_bf16.cache_clear()


# ---- the fp16 GradScaler path, on the CPU: torch.amp.GradScaler("cpu") is a real scaler ---------------------
@pytest.fixture
def fp16_here(monkeypatch):
    """Let fp16 run on this CPU; torch's CPU GradScaler then does the real scaling, unscaling and skipping."""
    monkeypatch.setattr(devices, "supports_fp16_scaler", lambda device: True)


class RecordingScaler(torch.amp.GradScaler):
    def __init__(self, events: list[str], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = events

    def scale(self, outputs):
        self.events.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):
        self.events.append("unscale")
        super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.events.append("step")
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        self.events.append("update")
        super().update(new_scale)


def grad_norm(module: nn.Module) -> float:
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters()])).item()


def record_clips(trainer, events: list[str], norms: list[float]) -> None:
    clip = trainer.engine.clip_configured

    def recording_clip() -> None:
        events.append("clip")
        norms.append(grad_norm(trainer.module))
        clip()

    trainer.engine.clip_configured = recording_clip


def test_fp16_unscales_before_clipping_and_updates_once_per_real_step(fp16_here, make_trainer, monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(
        precision,
        "make_scaler",
        lambda device, init_scale, growth_interval: RecordingScaler(
            events, device.type, init_scale=init_scale, growth_interval=growth_interval
        ),
    )
    trainer = make_trainer({"amp": {"dtype": "fp16"}}, train={"grad_accum": 2, "clip_grad_norm": 0.5})
    assert trainer.strategy.precision is trainer.speedups[0].precision()  # fp16 scales backward and the step
    record_clips(trainer, events, [])
    summary = trainer.fit()
    one_step = ["scale", "scale", "unscale", "clip", "step", "update"]  # two micro-batches, one optimizer step
    assert events == one_step * 2
    assert summary["speedup_metrics"]["amp"]["skipped_steps"] == 0
    assert math.isfinite(summary["metrics"]["train_loss"])


def norm_seen_by_clipping(make_trainer, init_scale: float) -> float:
    trainer = make_trainer(
        {"amp": {"dtype": "fp16", "init_scale": init_scale}}, train={"max_steps": 1, "clip_grad_norm": 1.0}
    )
    norms: list[float] = []
    record_clips(trainer, [], norms)
    trainer.fit()
    return norms[0]


def test_clipping_sees_the_true_gradients_not_the_scaled_ones(fp16_here, make_trainer):
    # Scaling by a power of two is exact in fp16, so after unscaling the norm matches an unscaled run.
    unscaled = norm_seen_by_clipping(make_trainer, 1.0)
    assert norm_seen_by_clipping(make_trainer, 2.0**16) == pytest.approx(unscaled, rel=1e-3)


@pytest.mark.parametrize("impl", ["for_loop", "fused"])
def test_inf_gradients_skip_the_step_and_the_schedule_and_are_counted(fp16_here, make_trainer, impl):
    # A loss scale of 2**40 overflows every fp16 gradient: both steps must be skipped, whichever optimizer
    # implementation runs (a fused optimizer gets the found-inf flag and skips inside its kernel).
    trainer = make_trainer(
        {"amp": {"dtype": "fp16", "init_scale": 2.0**40}, "optim": {"impl": impl}}, schedule={"name": "onecycle"}
    )
    start, lr = params(trainer), trainer.optimizer.param_groups[0]["lr"]
    summary = trainer.fit()
    assert summary["steps"] == 2
    assert summary["speedup_metrics"]["amp"] == {"skipped_steps": 2, "loss_scale": 2.0**38}
    assert all(torch.equal(a, b) for a, b in zip(start, params(trainer)))
    assert trainer.optimizer.param_groups[0]["lr"] == lr and trainer.scheduler.last_epoch == 0


def test_fp16_with_a_fused_optimizer_trains_like_the_for_loop_one(fp16_here, make_trainer):
    runs = []
    for impl in ("for_loop", "fused"):
        trainer = make_trainer({"amp": {"dtype": "fp16"}, "optim": {"impl": impl}})
        start = params(trainer)
        trainer.fit()
        runs.append(params(trainer))
    assert any(not torch.equal(a, b) for a, b in zip(start, runs[0])), "the steps must be applied"
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_scaler_state_survives_a_checkpoint_and_resumes(fp16_here, make_trainer):
    cfg = {"amp": {"dtype": "fp16", "init_scale": 2.0**10, "growth_interval": 1}}  # doubles after each good step
    first = make_trainer(cfg)
    first.fit()
    assert first.speedups[0].metrics()["loss_scale"] == 2.0**12
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    scaler = first.speedups[0].precision().scaler
    assert state["speedups"]["amp"] == {"scaler": scaler.state_dict(), "skipped_steps": 0}

    resumed = make_trainer(cfg, train={"max_steps": 3})
    resumed.load_state_dict(state)  # before fit(): the scaler does not exist yet, the state waits for setup
    resumed.fit()
    assert resumed.speedups[0].metrics() == {"skipped_steps": 0, "loss_scale": 2.0**13}


# ---- on a GPU ---------------------------------------------------------------------------------------------
@cuda_only
def test_fp16_on_cuda_scales_and_checkpoints(make_trainer):
    trainer = make_trainer({"amp": {"dtype": "fp16"}}, device="cuda")
    assert trainer.speedups[0].precision().scaler is not None
    summary = trainer.fit()
    assert math.isfinite(summary["metrics"]["train_loss"])
    assert summary["speedup_metrics"]["amp"]["loss_scale"] > 0
    scale = trainer.speedups[0].precision().scaler.state_dict()["scale"]
    assert scale == summary["speedup_metrics"]["amp"]["loss_scale"]


@cuda_only
def test_bf16_on_cuda_autocasts_where_the_gpu_supports_it(make_trainer):
    if not devices.supports_bf16(torch.device("cuda")):
        pytest.skip("this GPU has no bf16")
    assert output_dtypes(make_trainer({"amp": {"dtype": "bf16"}}, device="cuda")) == {torch.bfloat16}
