"""`accel profile`: the step's anatomy, operators by module, advice, profile.json/.md/.html and a valid trace."""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import statistics
import sys

import pytest
import yaml

from accel.cli import main
from conftest import TINY

PREEMPTION_MS = 3.0  # a third of a profiled step: a step lost from either clock still fails
PHASE_RANGES = {"accel/data", "accel/to_device", "accel/forward", "accel/loss", "accel/backward", "accel/optimizer"}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One `accel profile` of the tiny recipe: its folder, profile.json and what it printed."""
    folder = tmp_path_factory.mktemp("profile")
    recipe = folder / "recipe.yaml"
    # steps of ~10 ms, so a few ms of a busy machine's preemption is told apart from a step lost by a clock
    wider = copy.deepcopy(TINY)
    wider["model"]["args"]["width"] = 16
    wider["data"] |= {
        "batch_size": 32,
        "dataset": wider["data"]["dataset"] | {"shape": [1, 32, 32], "num_samples": 256},
    }
    recipe.write_text(yaml.safe_dump(wider))
    out = folder / "out"
    argv = ["profile", str(recipe), "--warmup", "1", "--steps", "3", "--rows", "5", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    return out, json.loads((out / "profile.json").read_text()), printed.getvalue()


def _trace(out):
    return json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))


def test_the_trace_is_chrome_trace_json_with_the_phase_ranges_and_small(profiled):
    out, report, _ = profiled
    events = _trace(out)["traceEvents"]
    complete = [event for event in events if event.get("ph") == "X"]
    assert complete and all({"name", "ts", "dur"} <= event.keys() for event in complete)
    assert all(isinstance(event["ts"], (int, float)) and event["dur"] >= 0 for event in complete)
    assert PHASE_RANGES <= {event["name"] for event in complete}
    assert any(event["name"].startswith("accel/module/") for event in complete)
    assert sum(event["name"].startswith("ProfilerStep#") for event in complete) == 3
    assert (out / "trace.json.gz").stat().st_size < 2_000_000
    assert report["trace"] == "trace.json.gz" and 0 < report["trace_mb"] < 2


def test_the_phases_add_up_to_each_measured_step(profiled):
    out, report, _ = profiled
    anatomy = report["anatomy"]
    rows = {row["phase"]: row for row in anatomy["phases"]}
    assert {"data", "to_device", "forward", "loss", "backward", "optimizer", "logging", "other"} <= rows.keys()
    for i, step_ms in enumerate(anatomy["step_ms"]):
        assert sum(row["per_step_ms"][i] for row in rows.values()) == pytest.approx(step_ms, rel=0.05)
    # the named phases cover the loop: in the median step, as a busy machine's preemption can land in any one
    shares = [other / step for other, step in zip(rows["other"]["per_step_ms"], anatomy["step_ms"])]
    assert statistics.median(shares) < 0.2
    # the window against the profiler's own clock, from its first step's start to its last step's start (the last
    # step's event also holds the profiler's stop, which grows on a busy machine): that span leaves out the
    # profiler's start, which the anatomy counts as the first step's `profiler` phase; give or take one
    # preemption of a busy machine, which lands on one clock's side of a boundary
    starts = sorted(e["ts"] for e in _trace(out)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    span_ms = (starts[-1] - starts[0]) / 1000
    starting_ms = rows["profiler"]["per_step_ms"][0]
    assert sum(anatomy["step_ms"][:-1]) - starting_ms == pytest.approx(span_ms, rel=0.05, abs=PREEMPTION_MS)
    assert rows["backward"]["peak_mb"] > 0 and anatomy["memory"] == "CPU resident set"


def test_the_operators_are_grouped_by_module_with_the_matmul_share(profiled):
    _, report, printed = profiled
    groups = {row["op"]: row for row in report["modules"]}
    assert "(backward)" in groups and any(name.endswith("(Sequential)") for name in groups)
    convs = [row for name, row in groups.items() if name.endswith("(Sequential)")]
    assert any("aten::mkldnn_convolution" in row["top"] or "aten::convolution" in row["top"] for row in convs)
    # autograd's ops (the first by time may be another where a busy machine's preemption lands)
    assert any(op.endswith("_backward") or "Backward" in op for op in groups["(backward)"]["top"])
    assert 0 < report["matmul_share"] < 1
    ops = report["ops"]["self_cpu_time"]
    assert len(ops) == 6 and ops[-1]["op"] == "total" and ops[0]["ms_per_step"] >= ops[1]["ms_per_step"]
    lines = printed.splitlines()
    assert lines[0].split() == ["phase", "ms/step", "share", "peak", "MB"]
    assert any(line.startswith("(backward)") for line in lines)
    assert "trace.json.gz (" in printed and lines[-1].endswith("profile.html")


def test_the_html_and_markdown_reports_hold_every_part(profiled):
    out, report, _ = profiled
    page = (out / "profile.html").read_text()
    for part in ("The step's anatomy", "Top operators by module", "Top operators", "Advice", "backward"):
        assert part in page
    assert '<img src="data:image/png;base64,' in page and (out / "anatomy.png").read_bytes().startswith(b"\x89PNG")
    markdown = (out / "profile.md").read_text()
    for part in ("## The step's anatomy", "## Top operators by module", "## Advice", "| backward |", "step (measured)"):
        assert part in markdown
    assert report["command"].startswith("accel profile") and report["steps"] == 3


def test_the_machine_s_load_over_the_window_is_recorded_and_a_busy_one_said_first(profiled):
    from accel.profile.report import markdown, summary_lines

    _, report, _ = profiled
    assert report["load"]["wall_s"] > 0 and report["load"]["cores"] >= 1  # measured over the profiled window
    busy = report | {"busy": "The machine was busy during 1 of 1 profiled windows: ..."}
    assert summary_lines(busy)[0] == "BUSY MACHINE: The machine was busy during 1 of 1 profiled windows: ..."
    assert "- BUSY MACHINE:" in markdown(busy)
    quiet = report | {"busy": None}
    assert summary_lines(quiet)[0].startswith("Profiled 3 steps")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "need --steps >= 1 and --warmup >= 0; got 0 and 2"),
        (["--sync-debug"], "--sync-debug needs CUDA"),
    ],
)
def test_profile_refuses_what_it_cannot_do(tiny, write_recipe, tmp_path, capsys, argv, message):
    assert main(["profile", str(write_recipe(tiny)), "--out", str(tmp_path / "p"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_training_without_profile_needs_no_matplotlib(tiny, write_recipe, tmp_path, monkeypatch):
    """The report's plots need matplotlib; a training-only environment (the XLA one) has none."""
    for name in [m for m in sys.modules if m.startswith(("matplotlib", "accel.profile", "accel.bench.plots"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    tiny["train"] = {"max_steps": 2}
    assert main(["train", str(write_recipe(tiny)), "--out", str(tmp_path / "run")]) == 0


def test_a_diverging_recipe_is_profiled_and_said_diverged_with_train_s_exit_code(tiny, write_recipe, tmp_path, capsys):
    tiny["optim"] = {"name": "adamw", "lr": 1e6}
    out = tmp_path / "p"
    assert main(["profile", str(write_recipe(tiny)), "--warmup", "1", "--steps", "3", "--out", str(out)]) == 3
    printed = capsys.readouterr().out
    report = json.loads((out / "profile.json").read_text())
    assert report["status"] == "diverged" and isinstance(report["diverged_at_step"], int)
    said = f"DIVERGED: the loss became NaN or infinite at step {report['diverged_at_step']}"
    assert printed.startswith(said) and f"- {said}" in (out / "profile.md").read_text()
    assert said in (out / "profile.html").read_text()


def _signal_when(monkeypatch, target, name):
    """SIGINT to this process when `target.name` is called: a signal at a known point of the run, not a clock."""
    import os
    import signal

    original = getattr(target, name)

    def then_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, then_signal)


def test_an_interrupted_profile_says_so_exits_130_and_promises_no_checkpoint(
    tiny, write_recipe, tmp_path, capsys, caplog, monkeypatch
):
    from accel.profile.window import ProfileWindow

    _signal_when(monkeypatch, ProfileWindow, "_open")  # as the profiled window begins
    out = tmp_path / "p"
    assert main(["profile", str(write_recipe(tiny)), "--warmup", "1", "--steps", "50", "--out", str(out)]) == 130
    report = json.loads((out / "profile.json").read_text())
    assert report["status"] == "interrupted" and report["steps_planned"] == 50 and report["steps"] < 50
    said = f"INTERRUPTED: a signal stopped the run after {report['steps']} of its 50 profiled steps"
    assert capsys.readouterr().out.startswith(said) and said in (out / "profile.md").read_text()
    assert f"Profiled {report['steps']} of 50 steps" in (out / "profile.md").read_text()
    stops = [r.getMessage() for r in caplog.records if "received signal" in r.getMessage()]
    assert stops == ["received signal 2: stopping after this step"]  # profile writes no checkpoint


def test_a_profile_interrupted_in_its_start_up_writes_nothing(tiny, write_recipe, tmp_path, capsys, monkeypatch):
    import accel.train.run

    _signal_when(monkeypatch, accel.train.run, "build_trainer")
    out = tmp_path / "p"
    assert main(["profile", str(write_recipe(tiny)), "--out", str(out)]) == 130
    assert f"interrupted before the profiled steps began: nothing written to {out}" in capsys.readouterr().err
    assert not out.exists()
