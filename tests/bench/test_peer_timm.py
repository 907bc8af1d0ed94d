"""timm's train.py, unchanged (../shared/peers: never edited), benched by its own argparse flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accel.cli import main
from conftest import ROOT

PEERS = ROOT.parent / "shared" / "peers"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (PEERS / "timm" / "train.py").is_file(), reason=f"no peer scripts at {PEERS}"),
]


@pytest.fixture(scope="module")
def timm_command(tmp_path_factory):
    """Its README's command, tiny: 32x32 images of its make_data.py (the images only: the text is run_clm's), 7
    batches an epoch, so a trial's steps pass an epoch's end (its evaluation, its checkpoint copied by os.link)."""
    pytest.importorskip("timm")
    sys.path.insert(0, str(PEERS))
    try:
        import make_data
    finally:
        sys.path.remove(str(PEERS))
    folder = tmp_path_factory.mktemp("timm")
    make_data.images(str(folder / "imgs"))
    return [sys.executable, str(PEERS / "timm" / "train.py"), "--data-dir", str(folder / "imgs"), "--dataset=",
            "--model", "resnet10t", "--num-classes", "10", "--img-size", "32", "-b", "64", "--workers", "0",
            "--device", "cpu", "--epochs", "2", "--output", str(folder / "out")]  # fmt: skip


def test_timms_speed_switches_are_found_and_one_is_benched(timm_command, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["bench", "--ablate", "--list", "--", *timm_command]) == 0
    listed = capsys.readouterr().out
    for switch in ("--channels-last=present", "--torchcompile=present", "--workers=2", "--fast-norm=present"):
        assert switch in listed
    assert "found --amp --amp-dtype bfloat16 (mixed precision): --amp 'use AMP for mixed precision training'" in listed
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--channels-last=absent,present", "--trials", "1", "--steps", "8", "--warmup", "1"]
    assert main([*argv, "--out", str(out), "--", *timm_command]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [variant["ok_trials"] for variant in report["variants"]] == [1, 1]  # each past its first epoch's end
    output = Path(timm_command[timm_command.index("--output") + 1])  # its --output: nothing from the probe or a trial
    assert not output.exists() or not any(output.iterdir())
    # what it made there in each trial (a run folder with its args.yaml) went to the trial's own folder, and is said
    assert (
        f"under its --output in 2 trials: each trial's in a folder of its own, removed with it, not in {output}"
        in (out / "report.md").read_text()
    )
