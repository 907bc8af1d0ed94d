"""Start-up: a one-process run imports none of FSDP's machinery, and summary.json says how long it took to start."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from accel.runs.records import read_summary
from accel.train import startup
from conftest import ROOT

SHARDING = ("torch.distributed.checkpoint", "torch.distributed.tensor", "torch.distributed.fsdp")
# `accel train` in a fresh process, as a user runs it, reporting what it imported: by accel itself (after
# importing the modules a run uses; the CLI imports them only when a command runs), and after the whole run
# (torch.optim's constructors import torch._dynamo, which imports FSDP and DTensor; not torch.distributed.checkpoint)
CHILD = """
import json, sys, time
started = time.perf_counter()
import accel.runs.checkpoint, accel.cli, accel.measure.flops, accel.train.run, accel.train.trainer
import_s = time.perf_counter() - started
by_accel = [m for m in {modules} if m in sys.modules]
code = accel.cli.main(["train", {recipe!r}, "--out", {out!r}])
print(json.dumps({{"code": code, "import_s": import_s, "by_accel": by_accel,
                   "after_run": [m for m in {modules} if m in sys.modules]}}))
"""


@pytest.mark.slow
def test_a_one_process_run_imports_no_distributed_checkpoint_and_records_its_startup(tiny, tmp_path):
    recipe, out = tmp_path / "tiny.yaml", tmp_path / "run"
    recipe.write_text(yaml.safe_dump(tiny))
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", CHILD.format(modules=SHARDING, recipe=str(recipe), out=str(out))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lifetime = time.perf_counter() - began
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert child["code"] == 0
    assert child["by_accel"] == []
    assert "torch.distributed.checkpoint" not in child["after_run"]
    summary = read_summary(out / "summary.json")
    # the interpreter's start and the imports are in it; the training and what follows it are not
    assert child["import_s"] < summary.startup_s < lifetime - summary.train_s


@pytest.mark.slow
def test_process_age_counts_from_the_process_start():
    code = "import time; time.sleep(0.3); from accel.train.startup import process_age_s; print(process_age_s())"
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # exact to a clock tick (10 ms): the start tick is truncated, so the age may exceed the wall time by one
    assert 0.3 <= float(result.stdout) <= time.perf_counter() - began + 0.01


def test_process_age_without_proc_asks_psutil(monkeypatch):
    def no_proc(name):
        raise OSError("no such file")

    in_proc = startup.process_age_s()
    monkeypatch.setattr(startup.Path, "read_text", lambda self: no_proc(self))
    assert abs(startup.process_age_s() - in_proc) < 1.5  # psutil's boot time may be whole seconds
