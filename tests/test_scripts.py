"""The measurement scripts in scripts/ run end to end on tiny inputs (their figures live in docs/benchmarks.md)."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def _script(*argv: str) -> str:
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_profile_step_prints_where_a_step_goes(tiny, write_recipe):
    out = _script("scripts/profile_step.py", str(write_recipe(tiny)), "--warmup", "1", "--steps", "2")
    lines = out.splitlines()
    assert lines[0].split() == ["op", "ms/step", "share"]
    assert any("addmm" in line or "convolution" in line for line in lines)
    assert lines[-1].startswith("total (self_cpu_time)")


def test_compare_plain_loop_reports_a_ratio_and_a_verdict(tmp_path):
    report = tmp_path / "compare.json"
    _script("scripts/compare_plain_loop.py", "--model", "small_cnn", "--shape", "1", "16", "16", "--batch-size",
            "16", "--steps", "3", "--rounds", "2", "--json", str(report))
    result = json.loads(report.read_text())
    assert result["verdict"] in {"within", "not within", "inconclusive"}
    assert len(result["rounds"]) == 2 and result["ratio_accel_over_plain"]["median"] > 0
