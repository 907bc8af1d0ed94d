"""On CUDA: the GPU's view of the profiled steps, the memory snapshot, and the snapshot a run that runs out of
memory leaves behind. Skipped with a reason where there is no GPU."""

from __future__ import annotations

import json
import pickle

import pytest

from conftest import cuda_only, run_cli

pytestmark = pytest.mark.cuda


@cuda_only
def test_profile_on_cuda_reports_gpu_idle_and_writes_a_memory_snapshot(tiny, write_recipe, tmp_path):
    tiny["device"] = "cuda"
    out = tmp_path / "profile"
    done = run_cli("profile", write_recipe(tiny), "--warmup", "2", "--steps", "3", "--out", out)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "profile.json").read_text())
    gpu = report["gpu"]
    assert 0 <= gpu["idle_fraction"] <= 1 and gpu["kernel_ms_per_step"] > 0 and gpu["kernels_per_step"] > 0
    assert report["anatomy"]["memory"] == "CUDA allocated" and "self_device_time" in report["ops"]
    snapshot = pickle.loads((out / report["memory_snapshot"]).read_bytes())
    assert snapshot["segments"] and snapshot["device_traces"][0]  # the window's allocations were recorded


@cuda_only
def test_a_run_out_of_cuda_memory_leaves_a_snapshot_and_says_where(tiny, write_recipe, tmp_path):
    tiny["device"] = "cuda"
    tiny["model"] = {"name": "tests.profiling.workloads:greedy"}
    run = tmp_path / "run"
    done = run_cli("train", write_recipe(tiny), "--out", run)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "CUDA out of memory" in done.stderr and str(run / "memory-oom.pickle") in done.stderr
    assert "segments" in pickle.loads((run / "memory-oom.pickle").read_bytes())
