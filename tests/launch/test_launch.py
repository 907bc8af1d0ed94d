"""The torchrun command `accel train --nproc` runs, the launch options it refuses, and what a restarted rank does
with the run directory it finds (no processes started here: tests/launch/test_nodes.py starts them)."""

from __future__ import annotations

import sys

import pytest

from accel.cli import main
from accel.launch.torchrun_command import Launch
from accel.runs.rundir import RunDir
from accel.train.run import continues_earlier_attempt

PREFIX = [sys.executable, "-m", "accel.launch.torchrun"]
ARGV = ["train", "r.yaml", "--out", "runs/x"]


def test_one_machine_picks_its_own_port():
    command = Launch(nproc=2).torchrun_command(ARGV)
    assert command == [*PREFIX, "--nproc-per-node=2", "--nnodes=1", "--standalone", "-m", "accel.cli", *ARGV]
    assert Launch(nproc=2).torchrun_env() == {}


def test_c10d_rendezvous_with_restarts():
    launch = Launch(nproc=4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400", rdzv_id="x", max_restarts=3)
    assert launch.torchrun_command(ARGV) == [
        *PREFIX,
        "--nproc-per-node=4",
        "--nnodes=2",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29400",
        "--rdzv-id=x",
        "--rdzv-conf=join_timeout=600",
        "-m",
        "accel.cli",
        *ARGV,
    ]
    assert launch.torchrun_env() == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    assert not launch.checks_run_dir  # node rank 0 does


def test_static_rendezvous_names_the_node_rank():
    launch = Launch(nproc=1, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500)
    assert launch.torchrun_command(ARGV)[4:8] == [
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=10.0.0.1",
        "--master-port=29500",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nnodes", "2", "--rdzv-endpoint", "h:1"], "--nnodes 2: give --out"),
        (["--nnodes", "2", "--out", "o"], "say where the machines meet"),
        (["--rdzv-endpoint", "h:1", "--master-port", "2"], "give one"),
        (["--rdzv-endpoint", "no-port"], "--rdzv-endpoint no-port: expected HOST:PORT"),
        (["--rdzv-endpoint", "h:1", "--rdzv-timeout", "0"], "--rdzv-timeout 0"),
        (["--nnodes", "2", "--node-rank", "2", "--out", "o", "--rdzv-endpoint", "h:1"], "0 <= --node-rank < --nnodes"),
    ],
)
def test_launch_options_that_cannot_work_are_refused(tiny, write_recipe, tmp_path, capsys, args, message):
    args = [a if a != "o" else str(tmp_path / "o") for a in args]
    assert main(["train", str(write_recipe(tiny)), "--nproc", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_max_restarts_needs_torchrun(tiny, write_recipe, capsys, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert main(["train", str(write_recipe(tiny)), "--max-restarts", "1"]) == 2
    assert "--max-restarts needs --nproc" in capsys.readouterr().err


def test_a_restart_continues_from_the_checkpoint_or_starts_over_without_one(tmp_path, monkeypatch):
    run_dir = RunDir(tmp_path / "run")
    for name in ("recipe.yaml", "env.json", "metrics.jsonl", "summary.json"):
        (run_dir.path / name).write_text("{}")
    run_dir.checkpoints.mkdir()
    (run_dir.checkpoints / ".last.pt.123.tmp").write_bytes(b"half")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert not continues_earlier_attempt(run_dir, is_main=True)  # a first start: check_new refuses the folder
    assert run_dir.holds_run()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert not continues_earlier_attempt(run_dir, is_main=False)  # other ranks look, and change nothing
    assert run_dir.holds_run()
    assert not continues_earlier_attempt(run_dir, is_main=True)
    assert not run_dir.holds_run() and run_dir.check_new() is None  # a fresh start is allowed here now
    run_dir.checkpoints.mkdir()
    run_dir.last_checkpoint.write_bytes(b"a checkpoint")
    assert continues_earlier_attempt(run_dir, is_main=True) and run_dir.last_checkpoint.is_file()
