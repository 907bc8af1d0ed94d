"""A trial never changes the user's files (accel/bench/isolation.py): in its own view of the file system where the
kernel allows one, restored from audit-hook backups where it does not, and checked by a before/after record."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from accel.bench import file_record, isolation
from accel.bench.isolation import restore
from accel.cli import main
from accel.trial.backups import Backups

# A script that writes through every API the guarantee covers, and starts a child python that trains (the trial's
# steps are measured there). Each change lands before the first step, so the probe makes them too.
HOSTILE = """
import os, pathlib, shutil, subprocess, sys
import numpy as np
import torch
from safetensors.torch import save_file

model = torch.nn.Linear(4, 1)
if "--child" in sys.argv:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    while True:
        model(torch.randn(8, 4)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
for i in (1, 2, 3):  # keep the newest checkpoint
    torch.save(model.state_dict(), f"ckpt-{i}.pt")
    if i > 1:
        os.remove(f"ckpt-{i - 1}.pt")
torch.save(model.state_dict(), "last.pt")
shutil.copyfile("last.pt", "best.pt")
torch.serialization.save(model.state_dict(), "serial.pt")
np.zeros(4).tofile("array.bin")
save_file({"w": model.weight.detach()}, "new.safetensors")
pathlib.Path("notes.txt").write_text("changed")
pathlib.Path("made").mkdir()
pathlib.Path("made", "x.txt").write_text("new")
os.truncate("log.txt", 0)
os.remove("data.csv")
subprocess.run(["cp", "notes.txt", "copy.txt"], check=True)
open("config.yaml", "w").write("changed")
open("weights.tmp", "w").write("new")
os.replace("weights.tmp", "weights.bin")
shutil.rmtree("old")
sys.exit(subprocess.run([sys.executable, __file__, "--child"]).returncode)
"""
USER_FILES = ("ckpt-1.pt", "ckpt-2.pt", "ckpt-3.pt", "last.pt", "best.pt", "serial.pt", "array.bin", "notes.txt")
USER_FILES += ("log.txt", "data.csv", "config.yaml", "weights.bin", "old/a.txt", "old/deep/b.txt")


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for name in USER_FILES:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(f"the user's {name}")
    (project / "train.py").write_text(HOSTILE)
    return project


def _files(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def _bench(tmp_path: Path, monkeypatch, mechanism: str) -> tuple[dict, dict, dict]:
    project, out = _project(tmp_path), tmp_path / "out"
    before = _files(project)
    monkeypatch.chdir(project)
    monkeypatch.setenv(isolation.CHOICE, mechanism)
    argv = ["bench", "--vary", "env:ROOM=1", "--trials", "1", "--steps", "2", "--warmup", "1", "--out", str(out)]
    assert main([*argv, "--", sys.executable, "train.py"]) == 0
    return before, _files(project), json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_a_trial_in_its_own_view_leaves_every_file_as_it_was(tmp_path, monkeypatch):
    if isolation.namespace_refusal():
        pytest.skip(f"no user namespaces here: {isolation.namespace_refusal()}")
    before, after, report = _bench(tmp_path, monkeypatch, "namespace")
    assert after == before  # rotation, copyfile, torch.serialization.save, cp, ...: nothing reached the real files
    assert report["files"] == "isolated"
    trial = report["variants"][0]["trials"][0]
    assert trial["files"] == "isolated" and trial["steps"] == 2
    # the child python that trained was measured and ended there, and both the record and its output say so
    assert trial["measured_in"].endswith("train.py --child")
    log = Path(trial["log"]).read_text()
    assert "accel: ended" in log
    # the header: the script's command (not the room's wrapper of it) and its variant's settings
    assert log.startswith(f"command: {sys.executable} train.py\nvariant: env:ROOM=1: ROOM=1\n")
    assert "\nenv: ROOM=1\n" in log


@pytest.mark.slow
def test_without_namespaces_each_change_is_restored_and_new_files_moved_aside(tmp_path, monkeypatch):
    before, after, report = _bench(tmp_path, monkeypatch, "hooks")
    assert after == before
    said = report["variants"][0]["trials"][0]["files"]
    assert report["files"].startswith("restored") and "new files it left moved to" in said
    left = tmp_path / "out" / "left-behind"
    assert {p.name for p in left.rglob("*")} >= {"new.safetensors", "copy.txt"}  # native writers' new files


@pytest.mark.slow
def test_a_change_nothing_could_put_back_stops_the_bench_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv(isolation.CHOICE, "hooks")
    project, own = tmp_path / "project", tmp_path / "trial"
    project.mkdir()
    (project / "best.pt").write_text("the user's")
    room = isolation.Room(["python", "train.py"], project, tmp_path / "left")
    env = {"ACCEL_TRIAL": str(own / "trial.json"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(isolation.FilesNotKept, match=r"best\.pt \(changed\)"):
        with room.entered(["python", "train.py"], env):
            (project / "best.pt").write_text("written by native code")  # no audit hook saw it


@pytest.mark.slow
def test_a_change_beside_an_isolated_trial_is_said_and_left_as_it_is(tmp_path, monkeypatch):
    """In its own view the trial cannot reach the real files: a change the record finds is the user's own (an editor
    saving meanwhile), kept and said, never moved aside nor a reason to stop."""
    if isolation.namespace_refusal():
        pytest.skip(f"no user namespaces here: {isolation.namespace_refusal()}")
    monkeypatch.setenv(isolation.CHOICE, "namespace")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("the user's")
    room = isolation.Room(["python", "train.py"], project, tmp_path / "left")
    with room.entered(["python", "train.py"], {"ACCEL_TRIAL": str(tmp_path / "trial" / "trial.json")}):
        (project / "train.py").write_text("edited meanwhile")
        (project / "notes.md").write_text("new meanwhile")
    assert room.kept.said().startswith("isolated, 2 changed meanwhile outside the trial")
    assert (project / "notes.md").read_text() == "new meanwhile" and not (tmp_path / "left").exists()


def test_the_audit_hooks_back_up_before_the_first_change_and_restore_after(tmp_path):
    folder, journal = tmp_path / "user", tmp_path / "room" / "journal.jsonl"
    (folder / "tree").mkdir(parents=True)
    for name in ("ckpt-1.pt", "best.pt", "log.txt", "tree/a.txt"):
        (folder / name).write_text(f"the user's {name}")
    before = _files(folder)
    hook = Backups(str(journal), [])
    seen = lambda event, *args: hook(event, args)  # noqa: E731 - what sys.addaudithook would call

    seen("os.remove", str(folder / "ckpt-1.pt"), None)
    os.remove(folder / "ckpt-1.pt")
    seen("open", str(folder / "best.pt"), "wb", 0)
    (folder / "best.pt").write_text("copied over")
    seen("open", str(folder / "best.pt"), "wb", 0)  # a second change: the first backup stays
    (folder / "best.pt").write_text("twice")
    seen("os.truncate", str(folder / "log.txt"), 0)
    os.truncate(folder / "log.txt", 0)
    seen("shutil.rmtree", str(folder / "tree"), None)
    shutil.rmtree(folder / "tree")
    seen("os.mkdir", str(folder / "made"), 0o777, None)
    (folder / "made").mkdir()
    seen("open", str(folder / "made" / "x"), "w", 0)
    (folder / "made" / "x").write_text("new")

    assert restore(str(journal)) == 6
    assert _files(folder) == before


def test_the_record_names_what_changed_was_removed_or_added(tmp_path):
    (tmp_path / "keep").write_text("same")
    (tmp_path / "change").write_text("one")
    (tmp_path / "gone").write_text("x")
    (tmp_path / "bench").mkdir()
    before = file_record.record([tmp_path], [tmp_path / "bench"])
    (tmp_path / "change").write_text("changed")
    (tmp_path / "gone").unlink()
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "bench" / "record.json").write_text("the bench's own")
    differences = file_record.compare(before, file_record.record([tmp_path], [tmp_path / "bench"]))
    assert differences.changed == [str(tmp_path / "change")]
    assert differences.removed == [str(tmp_path / "gone")]
    assert differences.added == [str(tmp_path / "new")]


def test_the_paths_a_command_names_are_watched_there_or_not():
    cwd = Path("/work/project")
    got = file_record.reachable(["python", "train.py", "--out=/data/runs/a", "--lr", "0.1", "../shared/x"], cwd)
    assert got == [Path("/work/project"), Path("/data/runs/a"), Path("/work/shared/x")]
