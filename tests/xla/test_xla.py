"""The XLA path, for real on XLA:CPU (scripts/test-xla builds the torch 2.9 + torch_xla environment)."""

from __future__ import annotations

import os

import pytest
import torch

torch_xla = pytest.importorskip("torch_xla", reason="needs torch_xla: run scripts/test-xla")
pytestmark = pytest.mark.xla

from accel.config.recipe import validate_recipe  # noqa: E402
from accel.runs.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from accel.train.run import build_trainer  # noqa: E402


@pytest.fixture(autouse=True)
def _xla_cpu(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", os.environ.get("PJRT_DEVICE", "CPU"))


def _recipe(tiny, device: str) -> dict:
    tiny["device"] = device
    tiny["train"] = {"epochs": 1, "max_steps": 4}
    return tiny


def test_auto_picks_xla_when_pjrt_device_is_set():
    from accel.devices import resolve_device

    assert resolve_device("auto").type == "xla"


def test_xla_steps_match_eager_cpu(tiny):
    import copy

    cpu = build_trainer(validate_recipe(_recipe(copy.deepcopy(tiny), "cpu")))
    xla = build_trainer(validate_recipe(_recipe(tiny, "xla")))
    assert xla.device.type == "xla" and xla.strategy.name == "xla" and xla.speedups == []
    cpu.fit(), xla.fit()
    for a, b in zip(cpu.module.parameters(), xla.module.parameters()):
        torch.testing.assert_close(a.detach(), b.detach().cpu(), rtol=1e-4, atol=1e-5)


def test_summary_reports_xla_compilations(tiny):
    summary = build_trainer(validate_recipe(_recipe(tiny, "xla"))).fit()
    stats = summary["speedup_metrics"]["xla"]
    assert summary["status"] == "completed" and stats["compiles"] >= 1 and stats["compile_s"] > 0


def test_xla_checkpoint_loads_on_cpu(tiny, tmp_path):
    trainer = build_trainer(validate_recipe(_recipe(tiny, "xla")))
    trainer.fit()
    save_checkpoint(trainer.state_dict(), tmp_path / "last.pt")
    state = load_checkpoint(tmp_path / "last.pt")
    assert all(t.device.type == "cpu" for t in state["model"].values())


def test_cuda_only_speedups_are_skipped_with_a_reason(tiny):
    tiny["speedups"] = {"amp": {"dtype": "fp16"}}
    trainer = build_trainer(validate_recipe(_recipe(tiny, "xla")))
    assert "amp" in trainer.skipped_speedups and "CUDA" in trainer.skipped_speedups["amp"]
