"""Whole runs on a CUDA GPU: the GPU preset end to end, fp16 checkpoints through the CLI, and the speed-ups
whose CUDA kernels differ from the CPU's (fused optimizer, channels_last convolutions, device augmentation).

Skipped with a reason where there is no GPU; `scripts/gpu-check` runs them on a GPU machine.
"""

from __future__ import annotations

import math

import pytest
import torch
from speedups.conftest import tiny_trainer, weights

from accel.data.augment import AugmentConfig, build_augment
from accel.runs.records import read_summary
from accel.speedups.cudnn import read_flags
from conftest import cuda_only, run_cli

pytestmark = pytest.mark.cuda

FAST_CUDA = {
    "cudnn": {"benchmark": True, "allow_tf32": True},
    "amp": {"dtype": "bf16"},
    "channels_last": {},
    "compile": {},
    "optim": {"impl": "fused"},
}


@cuda_only
def test_the_gpu_preset_trains_with_every_speed_up_active_and_restores_the_flags():
    before = read_flags()
    trainer = tiny_trainer(FAST_CUDA, device="cuda", train={"max_steps": 6})
    summary = trainer.fit()
    assert summary["skipped_speedups"] == {}
    assert set(summary["speedups"]) == set(FAST_CUDA)
    assert summary["device"].startswith("cuda")
    assert math.isfinite(summary["metrics"]["train_loss"]) and math.isfinite(summary["metrics"]["val_loss"])
    compiled = summary["speedup_metrics"]["compile"]
    assert compiled["graphs"] >= 1 and compiled["seconds"] > 0  # inductor really compiled, with Triton
    assert all(p.is_cuda for p in trainer.module.parameters())
    assert read_flags() == before


@cuda_only
def test_fused_adamw_on_cuda_matches_the_foreach_kernels():
    runs = {
        impl: tiny_trainer({"optim": {"impl": impl}}, device="cuda", train={"max_steps": 3})
        for impl in ("fused", "foreach")
    }
    for trainer in runs.values():
        trainer.fit()
    for fused, foreach in zip(weights(runs["fused"]), weights(runs["foreach"])):
        torch.testing.assert_close(fused, foreach, rtol=1e-4, atol=1e-5)


@cuda_only
def test_channels_last_on_cuda_gives_the_same_training_in_another_layout():
    plain = tiny_trainer({}, device="cuda", train={"max_steps": 2})
    nhwc = tiny_trainer({"channels_last": {}}, device="cuda", train={"max_steps": 2})
    losses = [t.fit()["metrics"]["train_loss"] for t in (plain, nhwc)]
    conv = next(m for m in nhwc.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)  # cuDNN picks other kernels: rounding only


@cuda_only
def test_device_augmentation_on_cuda_equals_the_same_augmentation_on_the_cpu():
    cfg = AugmentConfig(
        ops=[
            {"random_crop": {"size": 16, "padding": 2}},
            {"hflip": {}},
            {"cutout": {"size": 4}},
            {"mixup": {"alpha": 0.2}},
        ]
    )
    images = torch.randint(0, 256, (32, 3, 16, 16), dtype=torch.uint8).float()
    labels = torch.randint(0, 10, (32,))
    results = {}
    for device in ("cpu", "cuda"):
        augment = build_augment(cfg, None, num_classes=10, seed=3)
        results[device] = augment(images.to(device), labels.to(device))
    for cpu, cuda in zip(results["cpu"], results["cuda"]):
        assert cuda.is_cuda
        torch.testing.assert_close(cuda.cpu(), cpu)


@cuda_only
def test_fp16_run_through_the_cli_checkpoints_its_scale_and_resumes(tiny, write_recipe, tmp_path):
    tiny.update(device="cuda", speedups={"amp": {"dtype": "fp16"}, "cudnn": {"benchmark": True}})
    tiny["train"] = {"epochs": 2}
    recipe, out = write_recipe(tiny), tmp_path / "run"
    first = run_cli("train", recipe, "--out", out, "--set", "train.epochs=1")
    assert first.returncode == 0, first.stderr
    state = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
    assert state["speedups"]["amp"]["scaler"]["scale"] > 0
    assert all(t.device.type == "cpu" for t in state["model"].values())  # loadable on a machine with no GPU
    resumed = run_cli("train", recipe, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    summary = read_summary(out / "summary.json")
    assert summary.status == "completed" and summary.epochs == 2 and summary.device.startswith("cuda")
    assert "amp" in summary.speedups and summary.speedup_metrics["amp"]["loss_scale"] > 0
