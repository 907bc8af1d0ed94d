"""Several processes through torchrun (gloo on CPU): same results as one process, and resumable."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist
import yaml
from torch.distributed.device_mesh import init_device_mesh

from accel.cli import main
from accel.runs.checkpoint import load_checkpoint
from accel.runs.records import FitSummary, read_summary
from accel.strategy.world import destroy_process_group
from conftest import LIMIT_S, ROOT, finish, wait_for_first_checkpoint, wait_until

# several processes that import torch: bounded by their progress (conftest.finish), not by the suite's 600 s clock
pytestmark = pytest.mark.timeout(LIMIT_S)
TORCHRUN_TWO = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]

RECIPE = {
    "name": "ddp",
    "seed": 0,
    # no batch norm: a sample's gradient must not depend on which process's batch it is in
    "model": {"name": "small_cnn", "args": {"width": 8, "batch_norm": False}},
    "data": {
        "dataset": {"name": "synthetic", "shape": [1, 8, 8], "num_samples": 320, "num_classes": 4},
        "batch_size": 8,
    },
    "optim": {"name": "sgd", "lr": 0.05},
    "schedule": {"name": "onecycle"},
    "train": {"epochs": 3},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False, "every_steps": 5},
}
TOLERANCE = 1e-5  # float32 all-reduce sums in another order than one process's mean


def _train(recipe, out, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "accel.cli", "train", str(recipe), "--out", str(out), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _summary(out) -> FitSummary:
    return read_summary(out / "summary.json")


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    return path


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_same_global_batch(recipe, tmp_path):
    two = _train(recipe, tmp_path / "two", "--nproc", "2")
    one = _train(recipe, tmp_path / "one", "--set", "data.batch_size=16")
    printed, err = finish(two)
    assert two.returncode == 0, err
    _, err = finish(one)
    assert one.returncode == 0, err
    assert printed.strip() == str(tmp_path / "two")  # only rank 0 speaks
    a, b = _summary(tmp_path / "two"), _summary(tmp_path / "one")
    assert a.steps == b.steps == 3 * (256 // 16)
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert a.metrics[key] == pytest.approx(b.metrics[key], rel=TOLERANCE, abs=TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_killed_two_process_run_resumes_to_the_same_result(recipe, tmp_path, strategy):
    longer = ("--set", "train.epochs=30", "--set", f"strategy={strategy}")  # room to kill it mid-run
    whole = _train(recipe, tmp_path / "whole", "--nproc", "2", *longer)
    victim = _train(recipe, tmp_path / "killed", "--nproc", "2", *longer)
    wait_for_first_checkpoint(tmp_path / "killed", victim)
    # torchrun starts each worker in a session of its own: kill the whole tree at once, as a lost machine would
    tree = psutil.Process(victim.pid).children(recursive=True) + [psutil.Process(victim.pid)]
    for process in tree:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:  # already gone: nothing left to kill
            pass
    victim.wait()
    assert not (tmp_path / "killed" / "summary.json").exists(), "killed too late: the run had finished"
    resumed = _train(recipe, tmp_path / "killed", "--nproc", "2", "--resume", *longer)
    _, err = finish(resumed)
    assert resumed.returncode == 0, err
    _, err = finish(whole)
    assert whole.returncode == 0, err
    a, b = _summary(tmp_path / "whole"), _summary(tmp_path / "killed")
    assert a.steps == b.steps
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert a.metrics[key] == pytest.approx(b.metrics[key], rel=TOLERANCE, abs=TOLERANCE)


@pytest.mark.slow
def test_fsdp_trains_as_ddp_does_and_writes_the_same_checkpoint(recipe, tmp_path):
    # accumulation (no reduce-scatter on the first micro-batch), clipping of sharded gradients, momentum state;
    # 165 samples leave 33 for validation: 17 and 16 per rank, so 3 and 2 batches, which FSDP must even out
    harder = (
        "--set",
        "data.dataset.num_samples=165",
        "--set",
        "train.grad_accum=2",
        "--set",
        "train.clip_grad_norm=0.5",
        "--set",
        "optim.momentum=0.9",
    )
    gathered = ("--set", "checkpoint.sharded=false")  # whole tensors in last.pt (sharded: test_sharded_checkpoint)
    runs = {
        s: _train(recipe, tmp_path / s, "--nproc", "2", "--set", f"strategy={s}", *harder, *gathered)
        for s in ("ddp", "fsdp")
    }
    for strategy, run in runs.items():
        _, err = finish(run)
        assert run.returncode == 0, f"{strategy}: {err}"
    ddp, fsdp = _summary(tmp_path / "ddp"), _summary(tmp_path / "fsdp")
    assert ddp.steps == fsdp.steps > 0
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert fsdp.metrics[key] == pytest.approx(ddp.metrics[key], rel=TOLERANCE, abs=TOLERANCE)
    # whole, plain tensors under the same keys: loadable with weights_only, by either strategy or one process
    a, b = (load_checkpoint(tmp_path / s / "checkpoints" / "last.pt") for s in ("ddp", "fsdp"))
    assert b["model_signature"] == a["model_signature"]
    assert b["model"].keys() == a["model"].keys()
    for name, tensor in a["model"].items():
        assert type(b["model"][name]) is torch.Tensor
        torch.testing.assert_close(b["model"][name], tensor, rtol=TOLERANCE, atol=TOLERANCE)
    assert b["optimizer"]["param_groups"] == a["optimizer"]["param_groups"]
    for index, state in a["optimizer"]["state"].items():
        torch.testing.assert_close(
            b["optimizer"]["state"][index]["momentum_buffer"], state["momentum_buffer"], rtol=1e-4, atol=TOLERANCE
        )
    # the fsdp run as if stopped after its last step (a completed run is never resumed with no more to train),
    # resumed under ddp: nothing left to train, and its final evaluation agrees
    (tmp_path / "fsdp" / "summary.json").write_text(fsdp.model_copy(update={"status": "interrupted"}).to_json())
    resumed = _train(recipe, tmp_path / "fsdp", "--nproc", "2", "--resume", "--set", "strategy=ddp", *harder)
    _, err = finish(resumed)
    assert resumed.returncode == 0, err
    again = _summary(tmp_path / "fsdp")
    assert again.steps == fsdp.steps
    for key in ("val_loss", "val_accuracy"):
        assert again.metrics[key] == pytest.approx(fsdp.metrics[key], rel=TOLERANCE, abs=TOLERANCE)


@pytest.mark.slow
def test_a_signal_to_one_process_stops_every_rank_at_the_same_step(recipe, tmp_path):
    longer = ("--set", "train.epochs=40")  # long enough that the signal lands mid-run
    run = _train(recipe, tmp_path / "run", "--nproc", "2", *longer)
    wait_for_first_checkpoint(tmp_path / "run", run)
    workers = [
        p
        for p in psutil.Process(run.pid).children(recursive=True)
        if "accel.cli" in p.cmdline() and "accel.launch.torchrun" not in p.cmdline()
    ]
    assert len(workers) == 2
    workers[-1].send_signal(signal.SIGTERM)  # one rank only: the others learn of it at the next agreement
    finish(run)
    summary = _summary(tmp_path / "run")
    assert summary.status == "interrupted" and 0 < summary.steps < 40 * 16
    assert summary.steps % 5 == 0  # ranks agree on stopping once per logging interval (every_steps: 5)
    resumed = _train(recipe, tmp_path / "run", "--nproc", "2", "--resume", *longer)
    _, err = finish(resumed)
    assert resumed.returncode == 0, err
    assert _summary(tmp_path / "run").steps == 40 * 16


def _kill(processes) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:  # already gone
            pass


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_a_stop_signal_to_accel_train_reaches_every_rank_which_save_and_report(recipe, tmp_path, signum):
    run = _train(recipe, tmp_path / "run", "--nproc", "2", "--set", "train.epochs=40")
    wait_for_first_checkpoint(tmp_path / "run", run)
    tree = psutil.Process(run.pid).children(recursive=True)  # torchrun and both ranks
    run.send_signal(signum)  # as `kill`, a scheduler or a closed terminal would, to the command the user started
    try:
        _, err = finish(run)
        _, alive = psutil.wait_procs(tree, timeout=30)
    finally:
        _kill(tree)
    assert run.returncode == 130, err
    assert not alive, f"still running after accel train ended: {alive}"
    assert "passing it to torchrun and its ranks" in err
    assert err.strip().splitlines()[-1].startswith("interrupted; continue with: accel train "), err
    summary = _summary(tmp_path / "run")
    assert summary.status == "interrupted" and 0 < summary.steps < 40 * 16


FAKE_TORCHRUN = """
import pathlib, signal, subprocess, sys, time
folder = pathlib.Path(sys.argv[1])
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
signal.signal(int(sys.argv[2]), lambda *_: (folder / "got-signal").touch())  # saving, as torchrun's ranks would
(folder / "rank-pid").write_text(str(rank.pid))
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup-closed-terminal"])
def test_the_torchrun_relay_passes_one_signal_acknowledges_the_second_and_kills_all_at_the_third(tmp_path, signum):
    (tmp_path / "torchrun.py").write_text(FAKE_TORCHRUN)
    err = tmp_path / "err.txt"
    relay = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import logging, sys\nfrom accel.launch.relay import run_torchrun\n"
            "logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
            "print(run_torchrun(sys.argv[1:]), flush=True)",
            sys.executable,
            str(tmp_path / "torchrun.py"),
            str(tmp_path),
            str(int(signum)),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
    )
    started = [psutil.Process(relay.pid)]
    try:
        wait_until(lambda: (tmp_path / "rank-pid").exists() and (tmp_path / "rank-pid").read_text(), relay, "torchrun")
        rank = psutil.Process(int((tmp_path / "rank-pid").read_text()))
        started += [*started[0].children(recursive=True), rank]
        relay.send_signal(signum)
        wait_until(lambda: (tmp_path / "got-signal").exists(), relay, "the signal passed on")
        relay.send_signal(signum)
        wait_until(lambda: "saving, please wait" in err.read_text(), relay, "the second signal acknowledged")
        assert relay.poll() is None and rank.is_running()
        relay.send_signal(signum)
        out, _ = relay.communicate(timeout=60)
        _, alive = psutil.wait_procs([rank], timeout=30)
    finally:  # a failed test leaves nothing running: the relay, the fake torchrun and its rank
        _kill(started)
    assert out.strip() == f"({-signal.SIGKILL}, {int(signum)})" and not alive
    assert "stopping torchrun and every rank now" in err.read_text()


def test_a_master_port_in_use_is_refused_before_torchrun_starts(recipe, tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["train", str(recipe), "--out", str(tmp_path / "run"), "--nproc", "2", "--master-port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"error: --master-port {port} is already in use on this machine" in err and "Traceback" not in err
    assert "leave out --master-port" in err


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_no_gloo_thread_outlives_a_finished_run(recipe, tmp_path, strategy):
    """gloo threads still running at interpreter exit abort the process now and then ("terminate called without
    an active exception"): after run_recipe returns, the process group and its threads must be gone (under
    fsdp, DTensor's caches keep device meshes that held the group)."""
    script = tmp_path / "run_and_list_threads.py"
    script.write_text(
        "import json, os, sys\n"
        "from accel.config.recipe import load_recipe\n"
        "from accel.train.run import run_recipe\n"
        f"run_recipe(load_recipe({str(recipe)!r}, ['train.epochs=1', 'strategy={strategy}']), "
        f"out={str(tmp_path / 'run')!r})\n"
        "names = sorted(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))\n"
        f"report = os.path.join({str(tmp_path)!r}, 'threads-' + os.environ['RANK'] + '.json')\n"
        "open(report, 'w').write(json.dumps(names))\n"
    )
    done = subprocess.run(
        [*TORCHRUN_TWO, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):  # each rank writes its own file: two ranks' prints can interleave on one stdout
        threads = json.loads((tmp_path / f"threads-{rank}.json").read_text())
        assert threads and not [name for name in threads if "gloo" in name], (rank, threads)


def _gloo_threads() -> list[str]:
    names = (Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task"))
    return [name for name in names if "gloo" in name]


def test_a_device_mesh_kept_after_the_run_does_not_keep_the_group_alive(tmp_path):
    """DTensor's sharding caches keep the meshes FSDP sharded over; each held the group (and its gloo threads)."""
    before = len(_gloo_threads())  # a group an earlier test in this process left behind is not this test's
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        cache = [init_device_mesh("cpu", (1,))]  # as DTensor's caches keep it
        assert cache[0]._pg_registry  # the mesh holds the group (its gloo threads start as torch decides)
    finally:
        destroy_process_group(wait_for_others=True)
    assert len(_gloo_threads()) <= before and cache[0]._pg_registry == {}


@pytest.mark.slow
def test_a_resume_every_rank_refuses_is_said_once_and_exits_2_as_one_process_does(recipe, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(recipe), "--out", str(out), "--set", "train.epochs=1"]) == 0
    capsys.readouterr()
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    other_model = ("--set", "model.args.width=4", "--set", "train.epochs=2")
    refused = _train(recipe, out, "--nproc", "2", "--resume", *other_model)
    _, err = finish(refused)
    assert refused.returncode == 2, err[-3000:]
    said = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and "was written for a different model" in said[0]  # not once per rank
    assert "Traceback" not in err and "ChildFailedError" not in err and "failed (exitcode" not in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


LOOP_LEFT_AT_EXIT = """
import atexit, os, sys, torch, accel
import torch.distributed as dist
from torch import nn

# registered first, so it runs last; a file per rank, as two ranks' prints to one pipe can interleave mid-line
atexit.register(lambda: open(f"{sys.argv[2]}/rank-{os.environ['RANK']}", "w").write(str(not dist.is_initialized())))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
eng = accel.Engine(device="cpu", strategy="fsdp")
model, optimizer = eng.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
eng.backward(model(torch.randn(4, 8)).square().mean())
optimizer.step()
if sys.argv[1] == "fail":
    raise RuntimeError("the loop failed")
"""


@pytest.mark.slow
def test_a_hand_written_loop_leaves_its_group_at_exit_unless_it_failed(tmp_path):
    """An fsdp loop that never leaves its group itself aborted now and then at exit (gloo's threads outliving the
    interpreter); after a failure nobody leaves, as the other ranks may be waiting in a collective."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP_LEFT_AT_EXIT)
    for how, left in (("finish", True), ("fail", False)):
        said = tmp_path / how
        said.mkdir()
        done = subprocess.run(
            [*TORCHRUN_TWO, str(script), how, str(said)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (done.returncode == 0) is left, done.stderr[-3000:]
        assert {p.name: p.read_text() for p in said.iterdir()} == {"rank-0": str(left), "rank-1": str(left)}
