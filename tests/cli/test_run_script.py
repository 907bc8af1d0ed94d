"""`accel run -- python train.py`: a user's script in one process, or in several through torchrun, its engine's
settings through ACCEL_SET, signals relayed and the exit code reported as `accel train` does (accel/cli/run.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from accel.cli import main
from accel.launch.torchrun_command import Launch
from conftest import ROOT

# A DDP loop that trains until it is stopped, as a script of its own stops cleanly: its SIGINT handler sets a flag,
# the ranks agree on it after each step (eng.world.any: a rank that stopped alone would leave the other waiting in
# its gradient reduction), and each rank says which signal it received before it closes its engine
ENDLESS = """
import os, signal, time, torch, accel
received = []
signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
eng = accel.Engine(device="cpu")
model = torch.nn.Linear(8, 2)
model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
rank = eng.world.rank
print(f"rank {rank} of {eng.world.size} pid {os.getpid()} strategy {eng.summary()['strategy']}", flush=True)
step = 0
while not eng.world.any(bool(received), eng.device):
    eng.backward(model(torch.randn(4, 8)).square().mean())
    optimizer.step()
    optimizer.zero_grad()
    step += 1
    if step == 3:
        print(f"rank {rank} stepped", flush=True)
deadline = time.time() + 60
while not received and time.time() < deadline:  # the other rank's flag stopped this one first: its own comes
    time.sleep(0.01)
print(f"rank {rank} received signal {received[0] if received else None} after {step} steps", flush=True)
eng.close()
"""


def _accel(*args: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "accel.cli", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True
    )


def _wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_two_processes_of_the_resnet_example_train_with_the_settings_given(tmp_path):
    log = tmp_path / "log.txt"
    tiny = ["--epochs", "1", "--samples", "16", "--batch", "8", "--size", "16"]
    with log.open("w") as handle:
        run = _accel(
            "run", "--nproc", "2", "--set", "speedups.channels_last.enabled=false", "--",
            sys.executable, "examples/resnet_loop.py", *tiny, log=handle,
        )  # fmt: skip
        assert run.wait(timeout=600) == 0, log.read_text()
    text = log.read_text()
    assert text.count("epoch 0: train loss") == 2  # both ranks trained
    assert text.count("ACCEL_SET overrides the script: speedups.channels_last.enabled=false") == 2  # in each rank


@pytest.mark.slow
def test_sigint_reaches_every_rank_and_the_run_stops_cleanly(tmp_path):
    script, log = tmp_path / "endless.py", tmp_path / "log.txt"
    script.write_text(ENDLESS)
    with log.open("w") as handle:
        run = _accel("run", "--nproc", "2", "--", sys.executable, str(script), log=handle)
    try:
        _wait_for(lambda: log.read_text().count("stepped") == 2 or run.poll() is not None, "both ranks to step")
        assert run.poll() is None, log.read_text()
        run.send_signal(signal.SIGINT)
        code = run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    text = log.read_text()
    assert code == 130, text
    pids = []
    for rank in (0, 1):
        assert f"rank {rank} of 2 pid" in text and "strategy ddp" in text  # DDP on CPU: gloo
        assert f"rank {rank} received signal {int(signal.SIGINT)} after" in text, text
        pids.append(int(text.split(f"rank {rank} of 2 pid ")[1].split()[0]))
    assert not [pid for pid in pids if psutil.pid_exists(pid)]  # every rank has ended
    assert "stopped by signal 2" in text


@pytest.mark.slow
def test_one_process_gets_the_settings_and_its_exit_code_is_reported(tmp_path, capfd):
    script = tmp_path / "train.py"
    script.write_text("import os, sys\nprint('ACCEL_SET=' + os.environ['ACCEL_SET'])\nsys.exit(3)\n")
    assert main(["run", "--set", "speedups.amp.dtype=bf16", "--", sys.executable, str(script)]) == 3
    assert "ACCEL_SET=speedups.amp.dtype=bf16" in capfd.readouterr().out


def test_a_bad_setting_is_refused_before_the_script_starts(tmp_path, capfd):
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    assert main(["run", "--set", "speedups.ampp.dtype=bf16", "--", sys.executable, str(script)]) == 2
    out, err = capfd.readouterr()
    assert "started" not in out and "ampp" in err and "amp" in err


def test_an_unbalanced_quote_in_accel_set_is_refused_before_the_script_starts(tmp_path, capfd, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    monkeypatch.setenv("ACCEL_SET", "speedups.amp.dtype='bf16")
    assert main(["run", "--", sys.executable, str(script)]) == 2
    out, err = capfd.readouterr()
    assert "started" not in out and "Traceback" not in err
    assert err.startswith('error: ACCEL_SET="speedups.amp.dtype=\'bf16" cannot be split into items: No closing')


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run"], "needs your script"),
        (["run", "--max-restarts", "1", "--", "python", __file__], "need --nproc"),
        (["run", "--nproc", "2", "--nnodes", "2", "--", "python", __file__], "say where the machines meet"),
    ],
)
def test_bad_launches_are_refused_with_one_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_torchrun_runs_the_script_as_given_in_every_process():
    command = Launch(nproc=2).script_command(["python", "train.py", "--lr", "0.1"])
    assert command[-5:] == ["--no-python", "python", "train.py", "--lr", "0.1"] and "--standalone" in command
    assert os.path.basename(command[0]).startswith("python")
