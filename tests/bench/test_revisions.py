"""`accel bench --rev`, `--fail-if-slower`, `--history`, `--bisect` and `accel history` on a small git repository
built here, whose script is a plain PyTorch loop (no accel in it) and in which one commit adds work to the step."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from accel.bench.records import RevisionReading
from accel.bench.rev_compare import gate
from accel.cli import main
from conftest import ROOT, finish, wait_until

# A plain loop whose step waits WAIT seconds for its data (a slow transform) beside a small model's step; the
# commit under test makes the wait four times as long. A wait, not arithmetic: on a shared two-core machine a
# neighbour halved one trial's arithmetic against another's, and two equal commits then read 0.59x apart; a wait
# is the same whatever runs beside it, so the figures the tests assert stand on a busy machine too
SCRIPT = """
import time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
WAIT = {wait}
model = torch.nn.Linear(128, 128)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 128)
for step in range(10**6):
    time.sleep(WAIT)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""
# a few short steps: a timed window under half a second, where the machine's load is not judged (accel/measure/
# load.py: a busy neighbour would withhold every verdict), after 3 warm-up steps (the first after the model is
# found ran 8 times as long as the rest)
TRIALS = ["--steps", "3", "--warmup", "3", "--trials", "3"]
ALLOWED = "25%"  # the longer wait makes a step about four times as long: far beyond this


def _git(repo: Path, *args: str) -> str:
    env = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _commit(repo: Path, message: str, files: dict[str, str], date: int) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    _git(repo, "add", *files)
    stamp = f"@{1_700_000_000 + date * 3600} +0000"
    os.environ["GIT_COMMITTER_DATE"] = stamp
    try:
        _git(repo, "commit", "-q", "-m", message, "--date", stamp)
    finally:
        del os.environ["GIT_COMMITTER_DATE"]
    return _git(repo, "rev-parse", "--short", "HEAD").strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """good -> docs (as fast) -> slow (a step four times as long) -> more docs; `broken` on a branch of its own; and a
    working tree with a staged file, an unstaged change and an untracked file."""
    repo = tmp_path_factory.mktemp("repo")
    _git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("out/\n")
    commits = {
        "good": _commit(repo, "A plain loop", {"train.py": SCRIPT.format(wait=0.015), ".gitignore": "out/\n"}, 0)
    }
    commits["docs"] = _commit(repo, "Say how to run it", {"README.md": "python train.py\n"}, 1)
    commits["slow"] = _commit(repo, "Add a slow transform", {"train.py": SCRIPT.format(wait=0.06)}, 2)
    commits["more"] = _commit(repo, "Say more", {"README.md": "python train.py, one thread\n"}, 3)
    _git(repo, "checkout", "-q", "-b", "broken")
    commits["broken"] = _commit(repo, "Break it", {"train.py": "raise SystemExit('the data is gone')\n"}, 4)
    _git(repo, "checkout", "-q", "main")
    (repo / "notes.txt").write_text("staged\n")
    _git(repo, "add", "notes.txt")
    (repo / "README.md").write_text("changed, not staged\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo, commits


def _state(repo: Path) -> dict:
    """What the user sees of the repository: every file's bytes (the index too), status, HEAD, branches and
    worktrees. The index is read before `git status`, which may refresh it."""
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and p.relative_to(repo).parts[0] not in ("out", ".git")
    }
    index = (repo / ".git" / "index").read_bytes()
    said = [_git(repo, *cmd) for cmd in (["status", "--porcelain"], ["rev-parse", "HEAD"], ["branch", "-a"])]
    return {"files": files, "index": index, "git": said, "worktrees": _git(repo, "worktree", "list", "--porcelain")}


def _accel(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """`accel ARGS` run from the repository, as a user runs it there."""
    argv = [sys.executable, "-m", "accel.cli", *args]
    env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = finish(process)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


# a busy machine withholds a bench's verdicts, by design, and the gate then cannot tell: the test measures again,
# as a user would
ATTEMPTS = 3


@pytest.fixture(scope="module")
def compared(repo):
    """One bench of five revisions: good, docs (as fast), slow, broken and the working tree (slow's script, with
    changes), which every test of a bench's figures shares: each revision's trials take seconds on a CPU. Its
    history file is out/h-N.jsonl, N the attempt."""
    path, commits = repo
    _git(path, "status", "--porcelain")  # the index's stat data settled, as any git command of the user's leaves it
    before = _state(path)
    revs = ",".join([commits["good"], commits["docs"], commits["slow"], "broken", "."])
    for attempt in range(ATTEMPTS):
        out, history = f"out/rev-{attempt}", f"out/h-{attempt}.jsonl"
        args = ["--rev", revs, "--fail-if-slower", ALLOWED, "--history", history, *TRIALS, "--out", out]
        done = _accel(path, "bench", *args, "--", sys.executable, "train.py")
        report = json.loads((path / out / "report.json").read_text())
        if "CANNOT TELL" not in done.stdout:  # the gate could tell for every revision
            break
    return done, before, report, path / history


@pytest.mark.slow
def test_a_slower_commit_is_found_slower_with_an_interval_excluding_one(repo, compared):
    _, commits = repo
    done, _, report, _ = compared
    readings = {r["variant"]: r for r in report["revision_readings"]}
    slow = readings[commits["slow"]]
    assert slow["against"] == commits["good"] and slow["ratio"]["verdict"] == "hurt"
    assert slow["ratio"]["ci95"][1] < 1 and slow["ratio"]["median"] < 0.75
    assert f"{commits['slow']} is " in slow["said"] and f"% slower than {commits['good']} [" in slow["said"]
    assert slow["said"] in done.stdout
    labels = [r["label"] for r in report["revisions"]]
    assert labels[0] == f'{commits["good"]} "A plain loop"' and labels[2] == f'{commits["slow"]} "Add a slow transform"'
    assert labels[4] == f'working tree ({commits["more"]} "Say more" + uncommitted changes)'
    assert readings["working-tree"]["ratio"]["ci95"][1] < 1  # the working tree runs slow's script


@pytest.mark.slow
def test_a_revision_that_fails_is_reported_with_its_error_and_the_others_go_on(repo, compared):
    _, commits = repo
    done, _, report, _ = compared
    broken = next(v for v in report["variants"] if v["name"] == commits["broken"])
    assert broken["ok_trials"] == 0 and all("the data is gone" in t["error"] for t in broken["trials"])
    assert "the data is gone" in done.stdout  # the failed trials, in the summary
    assert all(v["ok_trials"] == 3 for v in report["variants"] if v["name"] != commits["broken"])


@pytest.mark.slow
def test_fail_if_slower_exits_1_on_the_slower_commit(repo, compared):
    _, commits = repo
    done, _, _, _ = compared
    assert done.returncode == 1, done.stderr
    assert f"FAIL: {commits['slow']} is slower than {commits['good']} by more than 25%" in done.stdout


@pytest.mark.slow
def test_fail_if_slower_passes_between_two_equal_commits(repo, compared):
    """The bench's exit code is its worst revision's (slow's, above); between the two equal commits of the same
    bench the gate passes: exit code 0 for them alone."""
    _, commits = repo
    done, _, report, _ = compared
    assert f"ok: {commits['docs']} is not slower than {commits['good']} by more than 25%" in done.stdout
    equal = [RevisionReading.model_validate(r) for r in report["revision_readings"] if r["variant"] == commits["docs"]]
    assert gate(equal, 0.25) == (0, [f"ok: {commits['docs']} is not slower than {commits['good']} by more than 25%"])


@pytest.mark.slow
def test_the_users_working_tree_index_and_branches_are_unchanged(repo, compared):
    path, _ = repo
    _, before, _, _ = compared
    assert _state(path) == before
    assert not list((path / ".git" / "worktrees").glob("*"))  # every checkout removed


@pytest.mark.slow
@pytest.mark.slow
def test_the_history_records_each_revision_and_renders_a_page_with_its_plot(repo, compared):
    path, commits = repo
    lines = [json.loads(line) for line in compared[3].read_text().splitlines()]
    shorts = [line["short"] for line in lines]
    assert shorts == [commits["good"], commits["docs"], commits["slow"], commits["broken"], commits["more"]]
    assert lines[4]["dirty"] is True and lines[3]["samples_per_s"] is None
    assert {line["machine"] for line in lines} == {lines[0]["machine"]} and lines[0]["fingerprint"]["threads"] == 1
    assert lines[2]["commit_date"] == _git(path, "log", "-1", "--format=%cI", commits["slow"]).strip()
    assert lines[0]["commit"].startswith(commits["good"])
    done = _accel(path, "history", str(compared[3]), "--html", "out/history.html")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.strip().startswith(commits["slow"]))
    assert "Add a slow transform" in row and "stepped -" in row  # the change point
    page = (path / "out" / "history.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 1 and "stepped -" in page
    png = base64.b64decode(page.split('src="data:image/png;base64,')[1].split('"')[0])
    with Image.open(io.BytesIO(png)) as plot:  # the plot itself, not just its tag
        assert plot.format == "PNG" and plot.width >= 600
    browser = next(filter(None, map(shutil.which, ("chromium-headless-shell", "chromium", "chromium-browser"))), None)
    if browser:  # as a reader's browser sees the page, where one is installed
        argv = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            (path / "out/history.html").as_uri(),
        ]
        dom = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
        assert "<img" in dom and commits["slow"] in dom


@pytest.mark.slow
def test_bisect_names_the_commit_that_made_it_slower(repo):
    path, commits = repo
    done = _accel(
        path,
        "bench",
        "--bisect",
        f"{commits['good']}..{commits['more']}",
        "--fail-if-slower",
        ALLOWED,
        *TRIALS,
        "--out",
        "out/bisect",
        "--",
        sys.executable,
        "train.py",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'first slower commit: {commits["slow"]} "Add a slow transform", after 2 comparisons' in done.stdout
    said = json.loads((path / "out" / "bisect" / "bisect.json").read_text())
    assert [c["judged"] for c in said["comparisons"]] == ["not slower", "slower"]
    assert [c["label"][:7] for c in said["comparisons"]] == [commits["docs"][:7], commits["slow"][:7]]
    assert not list((path / ".git" / "worktrees").glob("*"))


def test_a_revision_the_repository_does_not_have_is_a_clear_error(repo, monkeypatch, capsys):
    path, commits = repo
    monkeypatch.chdir(path)
    assert main(["bench", "--rev", f"{commits['good']},nosuch", "--", sys.executable, "train.py"]) == 2
    said = capsys.readouterr().err
    assert "no revision `nosuch` in" in said and "git log --oneline" in said


def test_a_repository_with_submodules_is_a_clear_error(tmp_path, monkeypatch, capsys):
    _git(tmp_path, "init", "-q")
    (tmp_path / "train.py").write_text("")
    _git(tmp_path, "add", "train.py")
    _git(tmp_path, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendor/lib")
    _git(tmp_path, "commit", "-q", "-m", "with a submodule")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--rev", "HEAD,.", "--", sys.executable, "train.py"]) == 2
    assert "has submodules (vendor/lib)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_signal_removes_the_checkouts(repo):
    path, commits = repo
    argv = [sys.executable, "-m", "accel.cli", "bench", "--rev", f"{commits['good']},{commits['slow']}", *TRIALS]
    argv += ["--out", "out/stopped", "--", sys.executable, "train.py"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    bench = subprocess.Popen(argv, cwd=path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    worktrees = path / ".git" / "worktrees"
    wait_until(lambda: len(list(worktrees.glob("*"))) == 2, bench, "both checkouts")
    bench.send_signal(signal.SIGTERM)
    out, err = finish(bench)
    assert bench.returncode == 130, out + err
    assert not list(worktrees.glob("*")) and _git(path, "worktree", "list").count("\n") == 1
