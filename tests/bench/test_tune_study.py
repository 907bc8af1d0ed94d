"""tune's learning stages on an Optuna study (accel/bench/tune/study.py): workers in other processes sharing a SQLite
study (and a PostgreSQL server's, started by the test), a worker or a coordinator killed mid-trial, a rerun
continuing, the machine split between local workers, and the tune extra asked for. Real Optuna and SQLite
throughout; trials simulated, except in the one slow test."""

from __future__ import annotations

import glob
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from accel.bench.records import Trial
from accel.bench.trial_process import TrialSettings
from accel.bench.tune import Objective, time_knobs, tune
from accel.bench.tune import workers as local_workers
from accel.bench.tune.study import DONE, Stage, StudyRunner, StudySpec, default_name, join, storage
from accel.cli import main
from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from tests.bench.test_tune_time import lm_base, simulated_learning, time_settings  # noqa: F401 (a fixture)

FORK = multiprocessing.get_context("fork")  # a child starts at once, with the test's runner, no pickling
SETTINGS = TrialSettings(steps=5, warmup=1, evaluate=False)
JOBS = [(t, name, Path(f"/nowhere/{name}.yaml")) for t in range(3) for name in ("ref", "cand")]


def spec_at(tmp_path: Path, name: str = "search", url: str | None = None) -> StudySpec:
    return StudySpec(url or f"sqlite:///{tmp_path / 'study.db'}", name, heartbeat_s=1, grace_s=2)


@pytest.fixture(scope="module")
def postgresql() -> Iterator[str]:
    """A real PostgreSQL server of the test's own (Debian's `postgresql` package, which CI installs) in a temporary
    folder, on a free port, as the `postgres` user when the tests run as root (the server refuses root); its URL."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    if not found[-1]:
        pytest.skip("needs a PostgreSQL server: apt-get install postgresql (CI installs it)")
    pytest.importorskip("psycopg", reason="needs the PostgreSQL driver: pip install 'psycopg[binary]' (the dev extra)")
    bindir, root = Path(found[-1]).parent, Path(tempfile.mkdtemp(prefix="accel-pg-"))
    as_server = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_server:
        shutil.chown(root, "postgres")
    with socket.socket() as probe:  # a free port, as the OS hands one out
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def run(*argv) -> None:
        subprocess.run([*as_server, *map(str, argv)], check=True, capture_output=True, timeout=120)

    run(bindir / "initdb", "-D", root / "data", "-U", "accel", "--auth=trust")
    run(
        bindir / "pg_ctl",
        "-D",
        root / "data",
        "-l",
        root / "log",
        "-w",
        "-o",
        f"-p {port} -k {root} -h 127.0.0.1",
        "start",
    )
    try:
        yield f"postgresql://accel@127.0.0.1:{port}/postgres"
    finally:
        run(bindir / "pg_ctl", "-D", root / "data", "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def readings(device: str = "cpu A", pause: float = 0.0, calls: list | None = None):
    """A runner of made-up trials: one second each to the target, `pause` seconds of real time each."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        if calls is not None:
            calls.append([(t, name) for t, name, _ in jobs])
        time.sleep(pause * len(jobs))
        env = {"cpu": device, "torch": "2.x", "torch_threads": 1}
        return [Trial(variant=name, trial=t, samples_per_s=1.0, wall_s=1.0, env=env) for t, name, _ in jobs]

    return run_trials


def hang(marker: Path):
    """A runner whose trial never ends, once it has said it started."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        marker.write_text(str(os.getpid()))
        time.sleep(600)

    return run_trials


def _worker(spec: StudySpec, run_trials) -> None:
    os._exit(0 if join(spec, run_trials) >= 0 else 1)  # no pytest teardown in a forked child


def _wait_for(path: Path, seconds: float = 30) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def _states(spec: StudySpec) -> list[str]:
    (name,) = [n for n in optuna.get_all_study_names(storage(spec)) if "/" in n]
    return [t.state.name for t in optuna.load_study(study_name=name, storage=storage(spec)).get_trials()]


def test_two_worker_processes_share_a_search_through_sqlite(lm_base, tmp_path):  # noqa: F811
    base = validate_recipe(lm_base)
    spec = spec_at(tmp_path)
    runner = simulated_learning([])

    def slow(jobs, out, settings, console=None, skip=None):  # long enough that both take rounds
        time.sleep(0.4 * len(jobs) if out.name != "final" else 0)
        return runner(jobs, out, settings, console, skip)

    other = FORK.Process(target=_worker, args=(StudySpec(spec.storage, spec.name), slow), daemon=True)
    other.start()
    result = tune(
        base,
        [time_knobs(base)[0]],
        tmp_path / "work",
        time_settings(base),
        trials=4,
        final_check=True,
        run_trials=slow,
        objective=Objective("time"),
        study=spec,
    )
    other.join(30)
    assert other.exitcode == 0  # it ended when the search did
    assert result.chosen == {"optim.name": "muon"}  # as the same search chooses alone (test_tune_time)
    (stage,) = [n for n in optuna.get_all_study_names(storage(spec)) if "/" in n]
    rounds = optuna.load_study(study_name=stage, storage=storage(spec)).get_trials()
    assert sorted(t.params["round"] for t in rounds if t.state.name == "COMPLETE") == [0, 1, 2, 3]
    ran = {t.user_attrs["worker"] for t in rounds if t.state.name == "COMPLETE"}  # not a round lost in a race
    assert len(ran) == 2  # both processes ran rounds of it
    assert optuna.load_study(study_name=spec.name, storage=storage(spec)).user_attrs[DONE] is True
    # every round's trials came back to the search: four of each optimizer, judged there
    assert [r.target_reached for r in result.rows if r.knob == "optim.name"] == [4, 4]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path) -> str | None:
    """A study's storage: a SQLite file (None: spec_at's default) or a PostgreSQL server's database."""
    return request.getfixturevalue("postgresql") if request.param == "postgresql" else None


def test_a_worker_killed_mid_trial_loses_only_its_round_and_a_rerun_runs_nothing_again(tmp_path, capsys, storage_url):
    spec, marker = spec_at(tmp_path, url=storage_url), tmp_path / "started"
    doomed = FORK.Process(target=_worker, args=(spec_at(tmp_path, url=storage_url), hang(marker)), daemon=True)
    doomed.start()
    killed: list = []

    def run_trials(jobs, out, settings, console=None, skip=None):
        if not killed:  # the other worker has taken the next round and is mid-trial: its heartbeat stops
            _wait_for(marker)
            os.kill(doomed.pid, signal.SIGKILL)
            killed.append(doomed.pid)
        return readings()(jobs, out, settings)

    found = StudyRunner(spec, run_trials)(JOBS, tmp_path / "stage", SETTINGS)
    doomed.join(5)
    assert doomed.exitcode == -signal.SIGKILL
    assert [(t.trial, t.variant) for t in found] == [(t, n) for t, n, _ in JOBS]  # its round too, run here
    states = _states(spec)
    assert states.count("COMPLETE") == 3 and states.count("FAIL") == 1  # the lost round, and only it
    assert "lost its worker: marked FAIL, run again" in capsys.readouterr().err
    # the same stage again finds every round COMPLETE and runs none
    again: list = []
    assert len(StudyRunner(spec, readings(calls=again))(JOBS, tmp_path / "stage", SETTINGS)) == len(JOBS)
    assert again == [] and _states(spec).count("COMPLETE") == 3
    assert "3 of 3 rounds already COMPLETE, continuing" in capsys.readouterr().err


def test_a_coordinator_killed_mid_round_is_continued_by_the_same_command(tmp_path, capsys):
    spec, marker = spec_at(tmp_path), tmp_path / "started"
    first = FORK.Process(target=_coordinator_then_hang, args=(spec, marker), daemon=True)
    first.start()
    _wait_for(marker)
    os.kill(first.pid, signal.SIGKILL)
    first.join(5)
    calls: list = []
    found = StudyRunner(spec, readings(calls=calls))(JOBS, tmp_path / "stage", SETTINGS)
    # one round was COMPLETE before the kill: the rerun ran the round never started and the one in flight, once its
    # heartbeat had gone stale and Optuna had marked it FAIL (in either order: that depends on when it went stale)
    assert len(calls) == 2 and len(found) == len(JOBS) and _states(spec).count("COMPLETE") == 3
    err = capsys.readouterr().err
    assert "1 of 3 rounds already COMPLETE, continuing" in err
    lost = re.search(r"round (\d) \(trial #1\) lost its worker: marked FAIL, run again", err)
    assert lost and int(lost.group(1)) in [c[0][0] for c in calls]


def _coordinator_then_hang(spec: StudySpec, marker: Path) -> None:
    done = []

    def run_trials(jobs, out, settings, console=None, skip=None):
        if done:
            return hang(marker)(jobs, out, settings)
        done.append(1)
        return readings()(jobs, out, settings)

    StudyRunner(spec, run_trials)(JOBS, marker.parent / "stage", SETTINGS)


def test_a_round_marked_lost_while_its_late_worker_still_ran_it_runs_again_and_the_worker_goes_on(tmp_path, capsys):
    spec = spec_at(tmp_path)
    late: list = []

    def run_trials(jobs, out, settings, console=None, skip=None):
        if not late:  # a busy machine: its heartbeat came late, and another process marked the round FAIL
            study = optuna.load_study(study_name=_stage_name(spec), storage=storage(spec))
            (running,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
            storage(spec).set_trial_state_values(running._trial_id, optuna.trial.TrialState.FAIL)
            study.enqueue_trial({"round": running.params["round"]})
            late.append(running.params["round"])
        return readings()(jobs, out, settings)

    found = StudyRunner(spec, run_trials)(JOBS, tmp_path / "stage", SETTINGS)
    assert [(t.trial, t.variant) for t in found] == [(t, n) for t, n, _ in JOBS]  # the lost round too, run again
    assert _states(spec).count("COMPLETE") == 3 and _states(spec).count("FAIL") == 1
    assert "heartbeat came later than the grace period: it was marked FAIL, run again" in capsys.readouterr().err


@pytest.mark.slow
def test_the_dashboard_serves_the_study_with_what_each_rounds_candidates_read(tmp_path):
    spec = spec_at(tmp_path)
    StudyRunner(spec, readings())(JOBS, tmp_path / "stage", SETTINGS)
    stage = optuna.load_study(study_name=_stage_name(spec), storage=storage(spec))
    assert {t.user_attrs["readings"]["cand"] for t in stage.get_trials()} == {"1 samples/s"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "accel.cli", "tune", "--dashboard", spec.storage, "--dashboard-port", str(port)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end, studies = time.monotonic() + 60, None
        while studies is None and time.monotonic() < end and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as answer:
                    studies = json.load(answer)["study_summaries"]
            except OSError:  # not listening yet
                time.sleep(0.2)
        assert studies is not None, server.communicate(timeout=5)[0] if server.poll() is not None else "no answer"
        assert _stage_name(spec) in {s["study_name"] for s in studies}
    finally:
        server.terminate()
        said = server.communicate(timeout=30)[0]
    assert f"optuna-dashboard of {spec.storage}: http://127.0.0.1:{port}/" in said


def test_a_study_of_rounds_from_two_machines_says_so(tmp_path, capsys):
    spec = spec_at(tmp_path)
    machines = iter(["cpu A", "cpu B", "cpu A"])

    def run_trials(jobs, out, settings, console=None, skip=None):
        return readings(next(machines))(jobs, out, settings)

    StudyRunner(spec, run_trials)(JOBS, tmp_path / "stage", SETTINGS)
    said = " ".join(capsys.readouterr().err.split())
    assert "rounds ran on 2 machines (cpu A, torch 2.x, 1 threads; cpu B, torch 2.x, 1 threads)" in said
    assert "compared only with the reference of its own round" in said


def test_the_study_defaults_beside_the_output_and_to_a_name_of_the_command(lm_base, tmp_path):  # noqa: F811
    base = validate_recipe(lm_base)
    work = tmp_path / "work"
    knobs = [time_knobs(base)[0]]
    tune(base, knobs, work, time_settings(base), 2, run_trials=simulated_learning([]), objective=Objective("time"))
    names = optuna.get_all_study_names(f"sqlite:///{work / 'study.db'}")
    assert "tune" in names and any(n.startswith("tune/0-optim.name-") for n in names)
    # where and by whom it runs is not part of the name: the same search from anywhere is the same study
    command = ["tune", "lm.yaml", "--objective", "time"]
    same = default_name([*command, "--workers", "2", "--storage=sqlite:///x.db", "--work", "w"])
    assert default_name(command) == same != default_name([*command, "--trials", "5"])
    # a stage's round t holds trial t of every candidate, in the interleaved order
    stage = Stage.publish(spec_at(tmp_path), storage(spec_at(tmp_path)), JOBS, tmp_path / "s", SETTINGS)
    assert stage.rounds[1] == [(1, "ref", JOBS[2][2]), (1, "cand", JOBS[3][2])]


def test_workers_split_the_machine(monkeypatch):
    monkeypatch.setattr(local_workers.devices, "cuda_count", lambda: 0)
    monkeypatch.setattr(local_workers.devices, "usable_cpu_ids", lambda: [0, 1])
    split = local_workers.shares(2)
    assert [s.cores for s in split] == [[0], [1]] and all(s.env["OMP_NUM_THREADS"] == "1" for s in split)
    assert local_workers.split_line(split) == "2 workers on 2 cores: 1 thread(s) each (cores 0 | cores 1)"
    with pytest.raises(AccelError, match="this machine has 2 cores"):
        local_workers.shares(3)
    monkeypatch.setattr(local_workers.devices, "cuda_count", lambda: 8)
    gpus = local_workers.shares(8)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gpus] == [str(i) for i in range(8)]
    assert local_workers.split_line(gpus).startswith("8 workers, one GPU each (GPU 0 | GPU 1")


def test_a_time_search_without_optuna_names_the_tune_extra(monkeypatch, tiny, write_recipe, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)
    argv = ["tune", str(write_recipe(tiny)), "--objective", "time", "--work", str(tmp_path / "w")]
    assert main(argv) == 2
    assert "needs optuna, which is not installed: pip install 'accel[tune]'" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # said before anything ran
    monkeypatch.undo()
    assert main(["tune", str(write_recipe(tiny)), "--objective", "time", "--workers", "0,1"]) == 2
    assert "the number of worker processes sharing the study" in capsys.readouterr().err


@pytest.mark.slow
def test_a_joined_worker_runs_real_trials_of_the_study(tiny, write_recipe, tmp_path):
    """The coordinator and `accel tune --join` in another process, each running real trial processes."""
    from accel.bench import runner

    # no round is taken as lost here: on a busy machine a heartbeat can come seconds late (spec_at's 2 s grace)
    spec = replace(spec_at(tmp_path), grace_s=60)
    recipe = write_recipe(tiny)
    jobs = [(t, "recipe", recipe) for t in range(2)]
    worker = FORK.Process(target=lambda: os._exit(main(["tune", "--join", spec.storage])), daemon=True)
    # the CLI worker needs the search's study to exist to find it by the storage alone
    storage(spec)
    from accel.bench.tune.study import search_study

    search_study(spec, storage(spec), done=False)
    worker.start()
    found = StudyRunner(spec, runner.run_trials)(jobs, tmp_path / "stage", TrialSettings(steps=2, warmup=1))
    search_study(spec, storage(spec), done=True)
    worker.join(30)
    assert worker.exitcode == 0 and [t.trial for t in found] == [0, 1] and all(t.ok for t in found)
    every = optuna.load_study(study_name=_stage_name(spec), storage=storage(spec)).get_trials()
    assert sorted(t.state.name for t in every) == ["COMPLETE", "COMPLETE"]
    assert (tmp_path / "stage" / "trials").is_dir()


def _stage_name(spec: StudySpec) -> str:
    return next(n for n in optuna.get_all_study_names(storage(spec)) if n.startswith(spec.name + "/"))


def test_a_work_folder_of_a_search_cut_short_is_continued_and_a_finished_one_refused(tmp_path, tiny, write_recipe):
    from accel.cli.tune_study import continues

    work = tmp_path / "work"
    work.mkdir()
    assert not continues(work, time=True)  # no study there
    (work / "study.db").write_text("")
    assert continues(work, time=True) and not continues(work, time=False)  # killed: no tune.json
    (work / "tune.json").write_text('{"interrupted": true}')
    assert continues(work, time=True)  # Ctrl-C: its record says so
    (work / "tune.json").write_text('{"chosen": {}}')
    assert not continues(work, time=True)  # finished: its results are never overwritten
    argv = ["tune", str(write_recipe(tiny)), "--objective", "time", "--work", str(work)]
    assert main(argv) == 2


def test_the_study_options_need_the_time_objective(tiny, write_recipe, capsys):
    assert main(["tune", str(write_recipe(tiny)), "--storage", "sqlite:///x.db"]) == 2
    assert "--storage and --study need --objective time" in capsys.readouterr().err
