"""The field's own training scripts, unchanged (../shared/peers, README there), benched as their users run them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from accel.cli import main
from conftest import ROOT

PEERS = ROOT.parent / "shared" / "peers"
RUN_CLM = PEERS / "transformers" / "run_clm.py"
TINY_GPT2 = "n_embd=128,n_layer=4,n_head=4,n_positions=256,vocab_size=4096"
TRAIN_BYTES = 200_000  # of make_data's text: its tokenizing stays a second of the run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not RUN_CLM.is_file(), reason=f"{PEERS} is absent: it holds the real scripts these tests run"),
]


@pytest.fixture
def text(tmp_path, monkeypatch):
    """make_data.py's text (a tokenizer, train.txt, val.txt), train.txt cut short; nothing downloaded, and the
    datasets cache under tmp_path."""
    missing = [name for name in ("datasets", "evaluate") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"run_clm.py needs {', '.join(missing)}: pip install -c constraints.txt -e '.[peers]'")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(PEERS / "make_data.py"), str(data)], check=True, capture_output=True)
    train = data / "text" / "train.txt"
    train.write_text(train.read_text()[:TRAIN_BYTES].rsplit("\n", 1)[0] + "\n")
    return data / "text"


def test_run_clm_is_measured_for_the_benchs_steps_and_its_output_dir_keeps_nothing(tmp_path, text):
    out, output_dir = tmp_path / "bench", tmp_path / "out_clm"
    run_clm = [sys.executable, str(RUN_CLM), "--model_type", "gpt2", "--tokenizer_name", str(text / "tok")]
    run_clm += ["--config_overrides", TINY_GPT2, "--train_file", str(text / "train.txt"), "--validation_file"]
    run_clm += [str(text / "val.txt"), "--block_size", "128", "--per_device_train_batch_size", "8", "--do_train"]
    run_clm += ["--use_cpu", "--report_to", "none", "--max_steps", "200", "--output_dir", str(output_dir)]
    argv = ["bench", "--vary", "arg:--per_device_train_batch_size=4", "--steps", "2", "--warmup", "1"]
    assert main([*argv, "--trials", "1", "--out", str(out), "--", *run_clm]) == 0
    (variant,) = json.loads((out / "report.json").read_text())["variants"]
    trial = variant["trials"][0]
    assert trial["samples_per_s"] > 0 and trial["batch_size"] == 4  # the recorder started: datasets looks torch up
    assert trial["run_steps"] == 200 and len(trial["step_losses"]) == 3  # warm-up + 2 of the script's 200 steps
    assert not output_dir.exists() or not any(output_dir.iterdir())
