"""A script's trials forked from its variant's zygote (accel/bench/zygotes.py, accel/trial/zygote.py): each is what a
fresh `python SCRIPT ARGS` process would be, the zygote only saves its imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel.bench import zygotes
from accel.bench.isolation import Room
from accel.bench.script import probe
from accel.bench.trial_process import run_logged, trial_env
from accel.bench.zygotes import Zygotes
from accel.cli import main
from accel.engine import trial_variables

pytestmark = pytest.mark.slow  # every test starts python processes

# what a fresh process of the script would see, written where the test reads it
SEEN = """
import json, os, sys
import numpy as np
json.dump({
    "argv": sys.argv, "orig_argv": sys.orig_argv, "cwd": os.getcwd(), "name": __name__, "path0": sys.path[0],
    "path1": sys.path[1], "variable": os.environ.get("SEEN_VARIABLE"), "random": float(np.random.rand()),
    "pid": os.getpid(), "session": os.getsid(0), "loaded": "numpy" in sys.modules,
}, open(sys.argv[1], "w"))
print("said to the log")
sys.exit(int(sys.argv[2]))
"""


def _forked(tmp_path: Path, zygote, argv: list[str], env: dict[str, str], timeout: float | None = None):
    log = tmp_path / "trial.log"
    code = run_logged_forked(argv, log, env, timeout, tmp_path, zygote)
    return code, log.read_text()


def run_logged_forked(argv, log, env, timeout, cwd, zygote):
    room = Room(argv, cwd, cwd / "left-behind")
    env = env | {trial_variables.PATH: str(cwd / "record" / "trial.json")}  # the room's own folder beside it
    return run_logged(argv, log, env, timeout, cwd, room=room, zygote=zygote)


def test_a_forked_trial_is_the_script_run_as_a_fresh_process_would_be(tmp_path):
    script = tmp_path / "seen.py"
    script.write_text(SEEN)
    env = trial_env(tmp_path / "cache") | {"SEEN_VARIABLE": "variant's"}
    argv = [sys.executable, str(script)]
    with Zygotes(tmp_path / "zygotes") as pool:
        zygote = pool.for_trial(argv, env, ["numpy"], "seen")
        assert zygote is not None and zygote.preload_s > 0
        seen = []
        for n, code in enumerate((0, 3)):
            out = tmp_path / "record" / f"seen-{n}.json"  # the trial's own folder: the room keeps the rest
            got, log = _forked(tmp_path, zygote, [*argv, str(out), str(code)], env)
            assert got == code and "said to the log" in log
            seen.append(json.loads(out.read_text()))
        assert pool.for_trial(argv, env | {"TORCHINDUCTOR_CACHE_DIR": "elsewhere"}, ["numpy"], "seen") is zygote
        assert pool.for_trial(argv, env | {"SEEN_VARIABLE": "another"}, ["numpy"], "seen") is not zygote
    for one, out in zip(seen, ("seen-0.json", "seen-1.json")):
        assert one["argv"][0] == str(script) and one["argv"][1] == str(tmp_path / "record" / out)
        assert one["orig_argv"][:2] == argv and one["cwd"] == str(tmp_path)
        assert one["name"] == "__main__" and one["path0"] == str(tmp_path) and one["variable"] == "variant's"
        assert one["path1"] == env["PYTHONPATH"].split(os.pathsep)[0]  # PYTHONPATH after the script's folder
        assert one["session"] == one["pid"] and one["loaded"]  # a session of its own; numpy came preloaded
    assert seen[0]["random"] != seen[1]["random"]  # numpy's global state drawn anew, as a fresh process's


def test_a_forked_python_m_trial_is_the_module_run_as_a_fresh_python_m_would_run_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "seen.py").write_text(SEEN)
    env = trial_env(tmp_path / "cache")
    argv = [sys.executable, "-m", "pkg.seen"]
    out = tmp_path / "record" / "seen.json"
    with Zygotes(tmp_path / "zygotes") as pool:
        zygote = pool.for_trial(argv, env, ["numpy"], "seen")
        got, log = _forked(tmp_path, zygote, [*argv, str(out), "4"], env)
        assert got == 4 and "said to the log" in log and zygote.forks == 1
    seen = json.loads(out.read_text())
    assert seen["argv"] == [str(tmp_path / "pkg" / "seen.py"), str(out), "4"]  # as `python -m` sets it
    assert seen["name"] == "__main__" and seen["path0"] == str(tmp_path) and seen["loaded"]


def test_a_zygote_whose_imports_leave_a_thread_running_refuses_and_its_trials_start_fresh(tmp_path):
    (tmp_path / "threaded.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    env = trial_env(tmp_path / "cache") | {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    script = tmp_path / "script.py"
    script.write_text("")
    said = []
    with Zygotes(tmp_path / "zygotes", said.append) as pool:
        assert pool.for_trial([sys.executable, str(script)], env, ["threaded"], "threaded") is None
    assert said == [next(iter(pool.refused.values()))]
    assert said[0].startswith("threaded: its trials start as fresh processes: the imports left Python threads")


def test_a_hung_forked_trial_is_killed_at_its_timeout_with_its_group(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    env = trial_env(tmp_path / "cache")
    argv = [sys.executable, str(script)]
    with Zygotes(tmp_path / "zygotes") as pool:
        zygote = pool.for_trial(argv, env, ["json"], "hang")
        tick = time.monotonic()
        code, _ = _forked(tmp_path, zygote, argv, env, timeout=3)
        assert code is None and time.monotonic() - tick < 30
        sleepers = subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"], capture_output=True, text=True).stdout
        assert not sleepers.split()  # its child went with its group


def test_the_probe_preloads_only_what_was_imported_before_the_script_changed_its_environment(tmp_path):
    before = tmp_path / "before.py"
    before.write_text(
        "import os\nos.environ['OMP_NUM_THREADS'] = '1'\nimport torch\n"
        "m = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\nm(torch.ones(2)).sum().backward()\n"
        "o.step()\n"
    )
    after = tmp_path / "after.py"
    after.write_text(
        before.read_text().replace(
            "os.environ['OMP_NUM_THREADS'] = '1'\nimport torch",
            "import torch\nos.environ['SOMETHING'] = '1'\nimport wave",
        )
    )
    assert probe([sys.executable, str(before)], [], cwd=tmp_path)["preload"] == []
    preload = probe([sys.executable, str(after)], [], cwd=tmp_path)["preload"]
    assert "torch" in preload and "wave" not in preload  # wave was imported after the change


LOOP = """
import torch
model = torch.nn.Linear(64, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(10_000):
    model(torch.randn(32, 64)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_scripts_trials_fork_unless_their_environment_says_off_so_the_two_can_be_benched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.py").write_text(LOOP)
    argv = ["bench", "--vary", f"env:{zygotes.CHOICE}=on,off", "--trials", "2", "--steps", "3", "--warmup", "1"]
    assert main([*argv, "--out", str(tmp_path / "bench"), "--", sys.executable, "loop.py"]) == 0
    variants = json.loads((tmp_path / "bench" / "report.json").read_text())["variants"]
    assert all(t["samples_per_s"] > 0 for v in variants for t in v["trials"])
    assert [[t["forked_s"] is not None for t in v["trials"]] for v in variants] == [[True, True], [False, False]]
    assert "Trials: 2 of 4 forked from their variant's zygote" in (tmp_path / "bench" / "report.md").read_text()


def test_a_trial_whose_zygote_ended_starts_fresh_and_the_next_trial_gets_a_new_zygote(tmp_path):
    script = tmp_path / "seen.py"
    script.write_text(SEEN)
    env = trial_env(tmp_path / "cache")
    argv = [sys.executable, str(script)]
    with Zygotes(tmp_path / "zygotes") as pool:
        zygote = pool.for_trial(argv, env, ["numpy"], "seen")
        zygote.proc.kill()
        zygote.proc.wait()
        out = tmp_path / "record" / "seen.json"
        code, log = _forked(tmp_path, zygote, [*argv, str(out), "0"], env)
        assert code == 0 and "said to the log" in log and json.loads(out.read_text())["path0"] == str(tmp_path)
        again = pool.for_trial(argv, env, ["numpy"], "seen")
        assert again is not zygote and again.proc.poll() is None


def test_no_zygote_starts_once_those_alive_hold_their_share_of_the_machines_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(zygotes, "MEMORY_SHARE", 0.0)
    script = tmp_path / "script.py"
    script.write_text("")
    env, said = trial_env(tmp_path / "cache"), []
    with Zygotes(tmp_path / "zygotes", said.append) as pool:
        assert pool.for_trial([sys.executable, str(script)], env, ["json"], "first") is not None
        assert pool.for_trial([sys.executable, str(script)], env | {"OTHER": "1"}, ["json"], "second") is None
    assert said[0].startswith("second: its trials start as fresh processes: the zygotes alive hold")


# a library whose fork handler never returns in the child, as an OpenMP runtime without fork support can hang
HANGS_IN_A_FORK = "import os, time\nos.register_at_fork(after_in_child=lambda: time.sleep(3600))\n"
CHECK = """
import sys, time
from accel.trial import zygote
zygote.FORK_CHECK_S = 1.0  # a minute in a zygote: shortened here, where the child hangs for sure
tick = time.monotonic()
print(zygote.preload(sys.argv[1:]))
print(time.monotonic() - tick)
"""


@pytest.mark.parametrize("module", ["hangs_in_a_fork", "json"])
def test_a_zygote_whose_fork_hangs_refuses_in_its_time_and_leaves_no_process(tmp_path, module):
    (tmp_path / "hangs_in_a_fork.py").write_text(HANGS_IN_A_FORK)
    env = os.environ | {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, module], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    refused, took = done.stdout.splitlines()
    if module == "json":
        assert refused == "None", done.stderr
        return
    assert refused == "a forked process hung in its first parallel call (over 1 s)" and float(took) < 10
    hung = subprocess.run(["pgrep", "-f", "hangs_in_a_fork"], capture_output=True, text=True).stdout
    assert not hung.split()  # the hung child was killed, not left behind
