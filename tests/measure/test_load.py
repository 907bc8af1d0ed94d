"""The machine's load during a measurement: a bench beside a CPU-bound process is reported busy, a quiet one not."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from accel.cli import main
from accel.measure import load

SPIN = "while True: pass"


def _counters(wall_s: float, busy_s: float, own_s: float, steal_s: float = 0.0) -> load.Counters:
    return load.Counters(wall_s=wall_s, busy_s=busy_s, steal_s=steal_s, own_s=own_s, cores=2)


def test_a_quiet_window_is_not_busy_and_the_measured_tree_is_left_out():
    # 10 s on 2 cores: the trial's tree used 19 CPU s of the 19.5 busy; others 0.5 s, 2.5% of the cores
    quiet = load.between(_counters(0, 100, 50), _counters(10, 119.5, 69))
    assert quiet["others_cpu_s"] == pytest.approx(0.5) and quiet["others_share"] == pytest.approx(0.025)
    assert not load.busy(quiet) and load.busy_note([quiet, None]) is None
    # the same busy time with a tree that used only 9 s: others took 10.5 s, over half the cores
    busy = load.between(_counters(0, 100, 50), _counters(10, 119.5, 59))
    assert load.busy(busy) and busy["others_share"] == pytest.approx(0.525)
    stolen = load.between(_counters(0, 100, 50), _counters(10, 119.5, 69, steal_s=4))
    assert load.busy(stolen)  # the hypervisor's steal is time others took too
    note = load.busy_note([quiet, busy])
    assert note.startswith("The machine was busy during 1 of 2 trials: other processes took up to 52% of the 2 core")
    assert "Stop the other work" in note and "more trials would not help" in note  # any busy trial: no verdict


def test_a_window_too_short_for_the_tick_counters_is_not_judged():
    # 0.2 s on 2 cores: one 10 ms tick of rounding is 2.5% of it; over 0.02 s, 25%
    short = load.between(_counters(0, 100, 50), _counters(0.2, 100.3, 50))
    assert short["others_share"] == pytest.approx(0.75) and not load.busy(short)
    assert load.busy(load.between(_counters(0, 100, 50), _counters(0.5, 100.75, 50)))


@pytest.mark.slow
def test_a_live_child_counts_as_the_measured_trees_own():
    # a trial's DataLoader workers are alive while its timed steps run: their CPU time is the trial's, not others'
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass\nprint(flush=True)\ninput()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        start = load.counters()
        child.stdout.readline()  # it has spun for 1 CPU second and still lives
        seen = load.between(start, load.counters())
    finally:
        child.kill()
        child.wait()
    assert seen["own_cpu_s"] >= 0.9


@pytest.mark.slow
def test_the_measured_process_tree_counts_as_its_own():
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass"
    with load.watched() as seen:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    assert seen["own_cpu_s"] >= 0.9 and seen["cores"] >= 1 and seen["wall_s"] >= 0.9


@pytest.fixture
def spinner():
    """A CPU-bound process beside the test, running (it has used CPU) before the test goes on."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    deadline = time.monotonic() + 120
    while psutil.Process(proc.pid).cpu_times().user < 0.2 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_a_bench_beside_a_cpu_bound_process_says_the_machine_was_busy(spinner, tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", str(write_recipe(tiny)), "--vary", "data.batch_size=8,16", "--trials", "1", "--out", str(out)]
    assert main([*argv, "--steps", "60", "--warmup", "1"]) == 0  # long enough to judge (0.5 s on 2 cores)
    report = (out / "report.md").read_text()
    head = report.split("Baseline:")[0]
    assert "**Busy machine.** The machine was busy during " in head, report
    assert "Busy machine." in (out / "report.html").read_text().split("Baseline:")[0]
    assert "**Busy machine.**" in capsys.readouterr().out.split("Baseline:")[0]
