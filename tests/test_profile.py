"""`accel profile`: the ops of a tiny recipe's steps by self time, and its Chrome trace."""

from __future__ import annotations

import gzip
import json

import pytest

from accel.cli import main


def test_profile_prints_where_a_step_goes_and_writes_the_trace(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "profile"
    argv = ["profile", str(write_recipe(tiny)), "--warmup", "1", "--steps", "2", "--rows", "5", "--out", str(out)]
    assert main([*argv, "--set", "data.batch_size=8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["op", "ms/step", "share"]
    assert any("addmm" in line or "convolution" in line for line in lines[1:6])
    assert lines[6].startswith("total (self_cpu_time)") and float(lines[6].split()[-1]) > 0
    trace = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))
    assert any(event.get("name", "").startswith("aten::") for event in trace["traceEvents"])
    assert lines[-1].startswith(f"{out / 'trace.json.gz'} (") and " MB; open it in" in lines[-1]
    report = json.loads((out / "profile.json").read_text())
    assert (report["steps"], report["trace"]) == (2, "trace.json.gz") and report["command"].startswith("accel profile")
    ops = report["ops"]["self_cpu_time"]
    assert len(ops) == 6 and ops[-1]["op"] == "total" and ops[0]["ms_per_step"] >= ops[1]["ms_per_step"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "need --steps >= 1 and --warmup >= 0; got 0 and 2"),
        (["--sync-debug"], "--sync-debug needs CUDA"),
    ],
)
def test_profile_refuses_what_it_cannot_do(tiny, write_recipe, tmp_path, capsys, argv, message):
    assert main(["profile", str(write_recipe(tiny)), "--out", str(tmp_path / "p"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
