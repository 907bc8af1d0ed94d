"""`accel bench` stopped by Ctrl-C, SIGTERM or SIGHUP, and pointed at a folder that already holds results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel.cli import main
from conftest import ROOT, Progress, finish


def _trial_pids(out: Path) -> list[int]:
    """The bench trial processes writing under `out` (each runs in its own session, so only /proc finds them): their
    output goes to their log in a trials folder under `out`, whether started fresh or forked from a zygote (whose
    command line they keep)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            output = os.readlink(entry / "fd" / "1") if entry.name.isdigit() else ""
        except OSError:  # it ended while we looked, or has no output
            continue
        if output.startswith(f"{out}{os.sep}") and f"{os.sep}trials{os.sep}" in output:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _running_trial(out: Path, bench: subprocess.Popen) -> int:
    """Wait until a trial has imported torch (well past its start), and return its pid."""
    progress = Progress(bench)
    while True:
        assert bench.poll() is None, "the bench ended before a trial was running"
        progress.check("waiting for a trial to run")
        for pid in _trial_pids(out):
            try:
                if b"libtorch" in (Path("/proc") / str(pid) / "maps").read_bytes():
                    return pid
            except OSError:
                pass
        time.sleep(0.1)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a script's background job


@pytest.mark.parametrize(
    "signum, started_ignoring_sigint",
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGINT, True)],
    ids=["sigint", "sigterm", "sighup", "sigint-in-a-background-job"],
)
@pytest.mark.slow
def test_a_signal_stops_the_running_trial_and_the_report_says_interrupted(
    signum, started_ignoring_sigint, tiny, write_recipe, tmp_path
):
    out = tmp_path / "bench"
    argv = [
        sys.executable,
        "-m",
        "accel.cli",
        "bench",
        str(write_recipe(tiny)),
        "--vary",
        "data.batch_size=8,16",
        "--steps",
        "1000000",
        "--warmup",
        "0",
        "--trials",
        "1",
        "--out",
        str(out),
    ]
    bench = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_ignore_sigint if started_ignoring_sigint else None,
    )
    try:
        trial = _running_trial(out, bench)
        bench.send_signal(signum)  # to the bench alone, as `kill` does; Ctrl-C in a terminal also reaches only it
        stdout, stderr = finish(bench)
        assert bench.returncode == 130, stderr[-3000:]
        assert not _alive(trial)
        report = json.loads((out / "report.json").read_text())
        assert report["interrupted"] is True and report["trials_planned"] == 2
        assert report["recommended"] == {
            "overrides": {},
            "text": "none: the bench was interrupted before all its "
            "trials ran, so nothing is recommended from its partial figures; run it "
            "again to the end",
        }
        said = "**Interrupted** after 0 of 2 trials: the figures below cover the finished trials only, and nothing "
        assert said in (out / "report.md").read_text() and said in stdout
    finally:
        for pid in _trial_pids(out):
            os.kill(pid, signal.SIGKILL)
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()


@pytest.mark.parametrize(
    "held, said",
    [
        ("recipe.yaml", "already holds a run (recipe.yaml)"),
        ("report.json", "already holds earlier results (report.json)"),
        ("tune.json", "already holds earlier results (tune.json)"),
    ],
)
def test_bench_and_tune_refuse_an_out_that_holds_results(held, said, tiny, write_recipe, tmp_path, capsys):
    recipe = write_recipe(tiny)
    out = tmp_path / "taken"
    out.mkdir()
    (out / held).write_text("{}")
    for argv in (
        ["bench", str(recipe), "--vary", "data.batch_size=8,16", "--out", str(out)],
        ["tune", str(recipe), "--no-speedups", "--workers=", "--threads=", "--work", str(out)],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"error: {out} {said}; accel never overwrites one. Choose another {argv[-2]}" in err
    assert sorted(p.name for p in out.iterdir()) == [held]  # nothing written beside it


def test_bench_refuses_an_out_that_is_a_file(tiny, write_recipe, tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    assert (
        main(["bench", str(write_recipe(tiny)), "--vary", "data.batch_size=8,16", "--out", str(tmp_path / "file")]) == 2
    )
    assert f"error: {tmp_path / 'file'} is a file; `accel bench` writes a folder there" in capsys.readouterr().err


def _wait_dead(pid: int, timeout: float = 60) -> bool:
    deadline = time.time() + timeout
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_parent_killed_by_sigkill_takes_its_trial_along_and_its_folder_is_refused_with_what_to_do(
    command, tiny, write_recipe, tmp_path, capsys
):
    recipe, out, temp = write_recipe(tiny), tmp_path / "out", tmp_path / "tmp"
    temp.mkdir()
    if command == "bench":
        args = ["bench", str(recipe), "--vary", "data.batch_size=8,16", "--trials", "1", "--out", str(out)]
    else:
        args = ["tune", str(recipe), "--no-speedups", "--workers=", "--threads=", "--batch-sizes=8,16"]
        args += ["--trials", "1", "--work", str(out)]
    parent = subprocess.Popen(
        [sys.executable, "-m", "accel.cli", *args, "--steps", "1000000", "--warmup", "0"],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        trial = _running_trial(out, parent)
        # while it runs, the folder is its own: a second command there is refused and changes nothing
        assert main(args) == 2
        assert f"error: {out} is in use: accel process {parent.pid} is writing its results there." in (
            capsys.readouterr().err
        )
        parent.kill()  # SIGKILL: no handler runs, no report is written
        parent.wait()
        assert _wait_dead(trial), "the trial outlived its killed parent"
        assert not list(temp.iterdir())  # no compile cache left in the temporary folder
        before = sorted(p.relative_to(out) for p in out.rglob("*"))
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"error: {out} holds the trials of an `accel bench` or `accel tune` that was killed before it " in err
        assert "choose another --" in err and f"or delete {out} to run there again." in err
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # the refusal changed nothing
    finally:
        for pid in _trial_pids(out):
            os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()


@pytest.mark.slow
def test_a_tune_stopped_by_sighup_records_that_it_was_interrupted(tiny, write_recipe, tmp_path):
    work = tmp_path / "work"
    argv = [sys.executable, "-m", "accel.cli", "tune", str(write_recipe(tiny)), "--no-speedups", "--workers="]
    argv += ["--threads=", "--batch-sizes=8,16", "--trials", "1", "--steps", "1000000", "--warmup", "0"]
    tune = subprocess.Popen(
        [*argv, "--work", str(work)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        trial = _running_trial(work, tune)
        tune.send_signal(signal.SIGHUP)  # a closed terminal
        _, stderr = finish(tune)
        assert tune.returncode == 130, stderr[-3000:]
        assert "interrupted: no fragment written" in stderr
        assert _wait_dead(trial)
        record = json.loads((work / "tune.json").read_text())
        assert record["interrupted"] is True and record["chosen"] == {}
        assert not (work / "tuned.yaml").exists()
    finally:
        for pid in _trial_pids(work):
            os.kill(pid, signal.SIGKILL)
        if tune.poll() is None:
            tune.kill()
            tune.wait()
