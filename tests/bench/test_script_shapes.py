"""Well-known training scripts' shapes that ../shared/peers does not hold, benched unchanged (tests/bench/shapes/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accel.cli import main

SHAPES = Path(__file__).parent / "shapes"


@pytest.mark.slow
def test_a_torchvision_references_script_is_varied_by_its_long_option_where_its_command_gives_the_short(tmp_path):
    """Its command gives `-j 0`; `--vary arg:--workers=0,1` replaces it (appended, the script would see both), and
    the evaluation and checkpoints of its first epoch, inside the trial, leave its --output-dir as it was."""
    pytest.importorskip("torchvision")
    output = tmp_path / "out_tv"
    command = [sys.executable, str(SHAPES / "torchvision_train.py"), "--device", "cpu", "-b", "8", "-j", "0",
               "--train-size", "16", "--train-crop-size", "32", "--epochs", "2",
               "--output-dir", str(output)]  # fmt: skip
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--workers=0,1", "--trials", "1", "--steps", "2", "--warmup", "1", "--out", str(out)]
    assert main([*argv, "--", *command]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [variant["ok_trials"] for variant in report["variants"]] == [1, 1]
    commands = [recipe["command"] for recipe in report["recipes"].values()]
    assert "-j 1" in commands[1] and "--workers" not in commands[1]
    assert not output.exists()
