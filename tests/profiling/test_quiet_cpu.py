"""`accel profile` on a CPU says nothing that reads as accel failing (issue 39): kineto's "gpuGetDeviceCount failed
with code 35", logged where CUDA is installed but no GPU is, stays out of its output."""

from __future__ import annotations

import pytest
import torch

from conftest import run_cli


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA run keeps kineto's errors: they may matter there")
def test_a_cpu_profile_prints_no_kineto_device_error(tiny, write_recipe, tmp_path):
    tiny["data"]["dataset"]["num_samples"] = 256  # enough steps for the window
    done = run_cli("profile", write_recipe(tiny), "--out", tmp_path / "profile", "--warmup", "1", "--steps", "2")
    assert done.returncode == 0, done.stderr
    assert "gpuGetDeviceCount" not in done.stderr and "DeviceProperties" not in done.stderr
    assert (tmp_path / "profile" / "profile.json").is_file()
