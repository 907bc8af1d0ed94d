"""`accel bench` end to end on a tiny recipe, plus the runner's handling of trials that crash, hang or garble."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from accel.bench import runner
from accel.bench.plan import plan_bench
from accel.bench.records import Trial, Verdict
from accel.bench.runner import TrialProgress
from accel.bench.trial import main as trial_main
from accel.bench.trial_process import TrialSettings, log_tail, run_logged, run_trial_process, trial_argv, trial_env
from accel.cli import main
from accel.errors import AccelError, RecipeError
from conftest import syncs_by_caller

TRIAL_KEYS = {
    "variant",
    "trial",
    "error",
    "samples_per_s",
    "step_times_s",
    "data_wait_fraction",
    "peak_memory_mb",
    "first_step_s",
    "warmup_s",
    "final_loss",
    "val_accuracy",
    "wall_s",
    "batch_size",
    "index",
    "started_at",
}


def test_a_trials_log_starts_with_the_command_variant_and_environment_that_made_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KEPT", "as the parent has it")
    log = tmp_path / "t.log"
    env = trial_env(tmp_path / "cache") | {"ACCEL_SET": "speedups.amp.enabled=true", "OMP_NUM_THREADS": "2"}
    assert run_logged(["sh", "-c", "echo trained"], log, env, 20, variant="+amp: speedups.amp.enabled=true") == 0
    header, output = log.read_text().split("-" * 40 + "\n")
    lines = header.splitlines()
    assert lines[:2] == ["command: sh -c 'echo trained'", "variant: +amp: speedups.amp.enabled=true"]
    assert "env: ACCEL_SET=speedups.amp.enabled=true" in lines and "env: OMP_NUM_THREADS=2" in lines
    assert f"env: TORCHINDUCTOR_CACHE_DIR={tmp_path / 'cache'}" in lines  # accel's own
    assert not any("KEPT" in line for line in lines)  # unchanged from the parent's: not said
    assert output == "trained\n" and log_tail(log) == "trained"


@pytest.mark.slow
def test_bench_end_to_end_interleaves_and_reports_a_crashing_variant(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    # 4096 > the 51 training samples with drop_last: that variant's trials raise inside the trial process.
    argv = [
        "bench",
        str(write_recipe(tiny)),
        "--set",
        "data.batch_size=4",
        "--vary",
        "data.batch_size=8,4096",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--trials",
        "2",
        "--out",
        str(out),
        "--timeout",
        "120",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == str(out)
    assert "| data.batch_size=8 |" in captured.out and "## Failed trials" in captured.out
    assert "[4/4]" in captured.err and "data.batch_size=4096 trial 1: FAILED: " in captured.err

    report = json.loads((out / "report.json").read_text())
    assert report["baseline"] == "data.batch_size=8" and report["env"]["torch"]
    assert report["interrupted"] is False
    assert report["settings"] == {
        "steps": 3,
        "warmup": 1,
        "trials": 2,
        "resolution": 0.03,  # the one decision rule's (decide.py): --trials fixes the rounds, so no looks
        "rounds": 2,
        "timeout_s": 120.0,
        "compile_cache": "cold (fresh per trial)",
        "target": None,
        "eval_every": None,
        "run_steps": 12,  # the recipe's 2 epochs of its baseline's 6 steps each: a start-up must pay within them
        "run_steps_from": "the recipe's epochs",
    }
    assert report["recipes"]["data.batch_size=4096"]["data"]["batch_size"] == 4096
    good, bad = report["variants"]
    assert good["overrides"] == {"data.batch_size": 8} and good["ok_trials"] == 2
    assert good["samples_per_s"]["median"] > 0 and len(good["samples_per_s"]["ci95"]) == 2
    assert good["ratio_vs_baseline"]["median"] == 1.0 and good["final_loss"] > 0
    assert 0 <= good["val_accuracy"] <= 1 and good["first_step_s"] > 0
    for t in good["trials"]:
        assert TRIAL_KEYS <= set(t) and t["error"] is None
        assert len(t["step_times_s"]) == 3 and t["batch_size"] == 8 and "env" not in t
        # the machine's load over the timed steps only: from the warm-up's end to the last step
        assert sum(t["step_times_s"]) <= t["load"]["wall_s"] <= t["process_s"] - t["warmup_s"]
        assert t["forked_s"] > 0  # forked from a zygote that imported torch once, not `python -m` again
    assert bad["errors"] == 2 and bad["samples_per_s"]["median"] is None
    assert all("training loader yields no batches" in t["error"] for t in bad["trials"])

    started = sorted((t for r in report["variants"] for t in r["trials"]), key=lambda t: t["started_at"])
    assert [(t["variant"], t["trial"]) for t in started] == [
        ("data.batch_size=8", 0),
        ("data.batch_size=4096", 0),
        ("data.batch_size=8", 1),
        ("data.batch_size=4096", 1),
    ]
    assert [t["index"] for t in started] == [0, 1, 2, 3]
    recipes = {p.name for p in (out / "recipes").iterdir()}
    assert recipes == {"00-data.batch_size=8.yaml", "01-data.batch_size=4096.yaml"}
    assert len(list((out / "trials").glob("*.json"))) == 4 and len(list((out / "trials").glob("*.log"))) == 4
    header = (out / "trials" / "00-data.batch_size=8-t0.log").read_text().splitlines()[:2]
    assert header[0].startswith(f"command: {sys.executable} -m accel.bench.trial ")
    recipe = out / "recipes" / "00-data.batch_size=8.yaml"
    assert header[1] == f"variant: data.batch_size=8: the resolved recipe {recipe}"
    for name in ("report.md", "report.html", "throughput.png"):
        assert (out / name).is_file()


def test_list_prints_ablation_variants_without_running(tiny, write_recipe, tmp_path, capsys):
    tiny["speedups"] = {"channels_last": {}, "amp": {"dtype": "bf16"}, "compile": {"enabled": False}}
    out = tmp_path / "never"
    assert main(["bench", str(write_recipe(tiny)), "--ablate", "--list", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["baseline", "all", "+channels_last", "+amp", "-channels_last", "-amp"]
    assert "speedups.channels_last.enabled=true" in lines[2] and "speedups.amp.enabled=false" in lines[2]
    assert not out.exists()


def test_plan_resolves_each_variant_on_top_of_set(tiny, write_recipe):
    tiny["speedups"] = {"amp": {"dtype": "bf16"}}
    plan = plan_bench(
        write_recipe(tiny),
        ["optim.lr=0.5"],
        ablate=False,
        vary=["speedups.amp.dtype=bf16,fp16", "data.batch_size=8,16"],
    )
    assert plan.baseline == "speedups.amp.dtype=bf16,data.batch_size=8" and len(plan.variants) == 4
    last = plan.recipes["speedups.amp.dtype=fp16,data.batch_size=16"]
    assert (last.speedups["amp"].dtype, last.data.batch_size, last.optim.lr) == ("fp16", 16, 0.5)
    quoted = plan_bench(write_recipe(tiny), [], ablate=False, vary=['name="64",other'])
    assert quoted.recipes["name=64"].name == "64"  # a quoted number stays a string through the override


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "exactly one of --ablate"),
        (["--ablate", "--vary", "data.batch_size=8,16"], "exactly one of --ablate"),
        (["--ablate"], "at least one enabled speed-up"),
        (["--vary", "data.batch_size=0,8"], "variant `data.batch_size=0`"),
        (["--vary", "data.batch_size=8,16", "--steps", "0"], "--steps >= 1"),
        # NaN compares false both ways: it was taken as no limit
        (["--vary", "data.batch_size=8,16", "--timeout", "nan"], "--timeout must be a positive, finite number"),
        (["--vary", "data.batch_size=8,16", "--timeout", "inf"], "leave it out for no limit"),
        (
            ["--vary", "data.batch_size=8,16", "--sync", "window", "--target", "val_accuracy=0.5"],
            "--sync window times the steps as one window",
        ),
    ],
)
def test_bad_bench_input_exits_2(tiny, write_recipe, capsys, argv, message):
    assert main(["bench", str(write_recipe(tiny)), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_plan_errors_are_accel_errors(tiny, write_recipe):
    with pytest.raises(RecipeError, match=r"--set data.batch_size=0"):
        plan_bench(write_recipe(tiny), [], ablate=False, vary=["data.batch_size=0,8"])
    with pytest.raises(AccelError, match="not KEY=V1,V2"):
        plan_bench(write_recipe(tiny), [], ablate=False, vary=["data.batch_size"])


def _py(tmp_path, code: str) -> Trial:
    env = trial_env(tmp_path / "cache")
    return run_trial_process([sys.executable, "-c", code], tmp_path / "r.json", tmp_path / "r.log", 20, env)


@pytest.mark.slow
def test_trial_process_failures_become_errors(tmp_path):
    out = str(tmp_path / "r.json")
    hung = run_trial_process(
        [sys.executable, "-c", "import time; print('still here', flush=True); time.sleep(60)"],
        tmp_path / "r.json",
        tmp_path / "r.log",
        1.0,
        trial_env(tmp_path / "c"),
    )
    assert hung.error.startswith("timed out after 1 s") and "still here" in hung.error
    crashed = _py(
        tmp_path, "import os, signal; print('about to die', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
    )
    assert "killed by SIGSEGV without a readable result" in crashed.error and "about to die" in crashed.error
    garbled = _py(tmp_path, f"open({out!r}, 'w').write('{{not json')")
    assert "exited with code 0 without a readable result" in garbled.error
    unknown = _py(tmp_path, f"import json; json.dump({{'error': None, 'samples_per_sec': 1.0}}, open({out!r}, 'w'))")
    assert "exited with code 0 without a readable result" in unknown.error  # not a trial record
    late = _py(
        tmp_path,
        f"import json, sys; json.dump({{'error': None, 'samples_per_s': 1.0}}, open({out!r}, 'w')); sys.exit(3)",
    )
    assert late.samples_per_s == 1.0 and "exited with code 3 after writing its result" in late.error
    env = _py(
        tmp_path,
        f"import json, os; json.dump({{'error': None, 'log': os.environ['TORCHINDUCTOR_CACHE_DIR']}},"
        f" open({out!r}, 'w'))",
    )
    assert env.to_data() == {"error": None, "log": str(tmp_path / "cache")}


def test_progress_prints_plain_lines_when_not_a_terminal():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200)
    with TrialProgress(console, 2) as progress:
        progress.started("+amp", 0)
        progress.finished(
            Trial(
                variant="+amp",
                trial=0,
                samples_per_s=123.45,
                first_step_s=2.5,
                skipped_speedups={"amp": "fp16 GradScaler needs CUDA"},
            )
        )
        progress.finished(
            Trial(variant="-amp", trial=0, error="Traceback (most recent call last):\n  x\nRuntimeError: boom [bad]\n")
        )
    assert buffer.getvalue().splitlines() == [
        "[1/2] +amp trial 0: 123.5 samples/s, first step 2.50 s (skipped here: amp)",
        "[2/2] -amp trial 0: FAILED: RuntimeError: boom [bad]",
    ]


def test_trial_entry_point_in_process(tiny, write_recipe, tmp_path):
    tiny["train"]["grad_accum"] = 2
    tiny["data"]["dataset"]["num_samples"] = 100  # 80 training samples: 8 batches of 10, 4 steps of 2 batches
    tiny["data"]["batch_size"] = 10
    out = tmp_path / "t.json"
    assert (
        trial_main(
            [
                str(write_recipe(tiny)),
                "--steps",
                "2",
                "--warmup",
                "1",
                "--json",
                str(out),
                "--variant",
                "v",
                "--trial",
                "3",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert (result["variant"], result["trial"], result["error"]) == ("v", 3, None)
    assert len(result["step_times_s"]) == 2 and result["steps"] == 2 and result["grad_accum"] == 2
    # Each timed step is two micro-batches of 10: throughput counts samples, not batches.
    assert result["samples_per_s"] == pytest.approx(40 / sum(result["step_times_s"]))
    median_rate = sorted(20 / s for s in result["step_times_s"])  # of 2 steps: their mean rate
    assert result["median_step_samples_per_s"] == pytest.approx(sum(median_rate) / 2)
    assert result["warmup_s"] >= result["first_step_s"] > 0 and 0 <= result["data_wait_fraction"] < 1
    assert result["peak_memory_mb"] > 0 and result["final_loss"] > 0 and result["val_accuracy"] is not None
    assert "compile_s" not in result  # nothing compiled
    # the machine's load over the timed steps only: after the build, the start-up and the warm-up
    assert sum(result["step_times_s"]) <= result["load"]["wall_s"]
    assert result["load"]["wall_s"] <= result["wall_s"] - result["build_s"] - result["warmup_s"]
    assert trial_main([str(tmp_path / "missing.yaml"), "--steps", "1", "--warmup", "0", "--json", str(out)]) == 1
    assert "Recipe file not found" in json.loads(out.read_text())["error"]


def test_a_trial_without_evaluation_still_guards_by_its_training_loss(tiny, write_recipe, tmp_path):
    out, recipe = tmp_path / "t.json", str(write_recipe(tiny))
    assert trial_main([recipe, "--steps", "2", "--warmup", "1", "--no-eval", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["val_accuracy"] is None and result["val_metric"] is None and result["final_loss"] > 0
    assert (
        trial_main(
            [recipe, "--steps", "2", "--warmup", "1", "--no-eval", "--target", "val_accuracy=0.9", "--json", str(out)]
        )
        == 1
    )
    assert "--target and --curve need evaluations" in json.loads(out.read_text())["error"]
    argv = trial_argv(tmp_path / "r.yaml", TrialSettings(2, 1, evaluate=False), out, "v", 0)
    assert argv[-1] == "--no-eval" and "--no-eval" not in trial_argv(
        tmp_path / "r.yaml", TrialSettings(2, 1), out, "v", 0
    )


@pytest.mark.parametrize("sync", ["step", "window"])
def test_a_window_trial_synchronises_around_its_timed_steps_only(tiny, write_recipe, tmp_path, monkeypatch, sync):
    """--sync window: no sync between the timed steps, so the host may run ahead as in a real run; the throughput is
    the timed samples over the window's wall time, which holds the steps, the gaps between them and the last sync."""
    callers, out = syncs_by_caller(monkeypatch), tmp_path / "t.json"
    argv = [str(write_recipe(tiny)), "--steps", "3", "--warmup", "2", "--json", str(out), "--sync", sync]
    assert trial_main(argv) == 0
    result = json.loads(out.read_text())
    by_steps = 3 * result["batch_size"] / sum(result["step_times_s"])
    if sync == "step":
        assert callers.count("_train_epoch") == 5 and "_windowed" not in callers
        assert result["samples_per_s"] == pytest.approx(by_steps)
    else:  # after each warm-up step, and the last
        assert callers.count("_windowed") == 3 and "_train_epoch" not in callers
        assert 0 < result["samples_per_s"] < by_steps
    with pytest.raises(AccelError, match="--sync window times the steps as one window"):
        TrialSettings(3, 2, target="val_accuracy=0.9", sync="window")
    assert trial_argv(tmp_path / "r.yaml", TrialSettings(3, 2, sync=sync), out, "v", 0)[-2:] == (
        ["--sync", "window"] if sync == "window" else ["--trial", "0"]
    )


@pytest.mark.parametrize("sync", ["step", "window"])
def test_a_trials_warm_up_waits_for_released_compile_workers_to_exit(tiny, write_recipe, tmp_path, monkeypatch, sync):
    """A compile-worker pool still starting in the timed steps halved a compiled preset's throughput on a GPU
    host: the warm-up's end waits for it, and that wait counts as warm-up, not in the timed steps."""
    import time

    import accel.bench.trial as trial_module

    waits, wait_s = [], 3.0  # three tiny steps took 1.2 s on a loaded machine: the wait must stand well above that

    def settle():
        waits.append(1)
        time.sleep(wait_s)
        return wait_s

    monkeypatch.setattr(trial_module, "settle_compile_workers", settle)
    out = tmp_path / "t.json"
    argv = [str(write_recipe(tiny)), "--steps", "3", "--warmup", "2", "--json", str(out), "--sync", sync]
    assert trial_main(argv) == 0
    result = json.loads(out.read_text())
    assert waits == [1] and result["warmup_s"] >= wait_s
    assert 3 * result["batch_size"] / result["samples_per_s"] < wait_s  # the timed steps, without the wait


def test_trial_records_what_compiling_cost(tiny, write_recipe, tmp_path):
    tiny["speedups"] = {"compile": {"backend": "eager"}}  # dynamo traces and counts; no C++ build
    out = tmp_path / "t.json"
    assert trial_main([str(write_recipe(tiny)), "--steps", "1", "--warmup", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["error"] is None and result["compile_s"] > 0
    assert result["graph_breaks"] == 0 and result["recompiles"] == 1  # the final evaluation: eval mode


def test_only_narrows_the_variants_and_keeps_the_baseline(tiny, write_recipe):
    from accel.bench.plan import plan_bench

    tiny["speedups"] = {"channels_last": {}, "threads": {"intra_op": 1}}
    plan = plan_bench(write_recipe(tiny), [], ablate=True, vary=[], only=["all"])
    assert [v.name for v in plan.variants] == ["baseline", "all"]
    with pytest.raises(AccelError, match="no variant named"):
        plan_bench(write_recipe(tiny), [], ablate=True, vary=[], only=["+amp"])


def test_ablation_names_that_start_with_a_dash_reach_the_trial_intact(tmp_path):
    from accel.bench.trial import _parser
    from accel.bench.trial_process import TrialSettings, trial_argv

    argv = trial_argv(tmp_path / "r.yaml", TrialSettings(5, 1), tmp_path / "t.json", "-amp", 2)
    args = _parser().parse_args(argv[3:])
    assert args.variant == "-amp" and args.trial == 2 and args.steps == 5


@pytest.mark.slow
def test_a_bench_whose_every_trial_failed_exits_1_and_says_so(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    # both sizes exceed the 51 training samples: every trial raises in its process
    argv = ["bench", str(write_recipe(tiny)), "--vary", "data.batch_size=4096,8192", "--trials", "1", "--steps", "1"]
    assert main([*argv, "--warmup", "0", "--timeout", "120", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "Traceback" not in err
    said = err[err.index("error: ") :]
    assert said.startswith("error: every trial failed (2 of 2), so nothing was measured; each trial's log is under ")
    assert "The first: data.batch_size=4096 trial 0: " in said and "training loader yields no batches" in said
    report = json.loads((out / "report.json").read_text())  # the failures are still reported
    assert [v["ok_trials"] for v in report["variants"]] == [0, 0] and (out / "report.md").is_file()
    assert len(list((out / "trials").glob("*.log"))) == 2


def test_the_trials_stop_at_the_first_whose_script_never_logged_the_targets_metric(tmp_path, monkeypatch):
    def job(index, trial, variant, recipe, out, settings, cwd, zygotes):  # `logs`: the variants that log val_loss
        if variant in logs:
            return Trial(variant=variant, trial=trial, samples_per_s=1.0, target_evals=[{"value": 1.0}])
        error = "the script logged no `val_loss` through eng.log in its 4 optimizer steps (it logged `loss`): log it"
        return Trial(variant=variant, trial=trial, error=error, unlogged_metric="val_loss")

    monkeypatch.setattr(runner, "_run_job", job)
    jobs = [(t, v, tmp_path / "r.yaml") for t in range(3) for v in ("a", "b")]
    logs = set()
    results = runner.run_trials(jobs, tmp_path, TrialSettings(4, 1), Console(file=io.StringIO()))
    assert len(results) == 1 and not results.interrupted
    assert results.stopped == (
        "the script logged no `val_loss` through eng.log in its 4 optimizer steps (it logged `loss`): log it. The "
        "remaining 5 trial(s) would fail the same way: not run."
    )
    logs = {"a"}  # a variant that logs it: another's failure is its own, and the trials go on
    assert len(runner.run_trials(jobs, tmp_path, TrialSettings(4, 1), Console(file=io.StringIO()))) == 6


def test_a_failed_trials_message_of_several_lines_is_said_whole():
    """The conflict rule's refusal spans lines; its last line alone ('Disable them ...') hid why (seen on a GPU)."""
    error = (
        "Traceback (most recent call last):\n"
        '  File "trial.py", line 3, in main\n'
        "    run()\n"
        "accel.errors.AccelError: speed-up `cuda_graphs` cannot be stacked with `compile`:\n"
        "  - one program at a time\n"
        "Disable them (`--set speedups.NAME.enabled=false`).\n"
    )
    said = Trial(variant="v", trial=0, error=error).error_said()
    assert said == (
        "accel.errors.AccelError: speed-up `cuda_graphs` cannot be stacked with `compile`: - one program at a time "
        "Disable them (`--set speedups.NAME.enabled=false`)."
    )
    assert Trial(error="out of memory\nmore").error_said() == "out of memory"
    assert Trial(error="x" * 1000).error_said().endswith("...") and len(Trial(error="x" * 1000).error_said()) == 400


def test_the_plan_knows_which_variants_the_conflict_rule_refuses(tiny, write_recipe):
    stacked = plan_bench(
        write_recipe(tiny), ["speedups.compile.enabled=true"], ablate=False, vary=["speedups.jit.enabled=false,true"]
    )
    assert list(stacked.refused) == ["speedups.jit.enabled=true"]
    assert "cannot be stacked" in stacked.refused["speedups.jit.enabled=true"]
    both = {**tiny, "speedups": {"compile": {}, "jit": {}}}
    ablation = plan_bench(write_recipe(both), [], ablate=True, vary=[])
    assert list(ablation.refused) == ["all"]  # each alone runs; together the rule refuses them


@pytest.mark.slow
def test_a_refused_variant_runs_no_trial_and_is_reported_refused(tiny, write_recipe, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", str(write_recipe(tiny)), "--set", "speedups.compile.enabled=true", "--vary"]
    argv += ["speedups.jit.enabled=false,true", "--steps", "1", "--warmup", "0", "--trials", "1", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "speedups.jit.enabled=true: refused, not run: " in err and "[1/1]" in err
    report = json.loads((out / "report.json").read_text())
    ran, refused = report["variants"]
    assert ran["ok_trials"] == 1 and "refused" not in ran
    assert refused["trials"] == [] and "cannot be stacked" in refused["refused"]
    assert len(list((out / "trials").glob("*.json"))) == 1
    assert "refused, not run" in (out / "report.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a missing device is what this test needs")
def test_a_plan_for_a_device_missing_here_judges_nothing_and_still_lists(tiny, write_recipe, capsys):
    recipe = str(write_recipe({**tiny, "device": "cuda"}))
    plan = plan_bench(recipe, [], ablate=False, vary=["speedups.jit.enabled=false,true"])
    assert plan.refused == {}  # its trials say the device is missing, each one
    assert main(["bench", recipe, "--vary", "speedups.jit.enabled=false,true", "--list"]) == 0
    assert "speedups.jit.enabled=true" in capsys.readouterr().out


@pytest.mark.slow
def test_a_window_by_time_times_steps_until_they_hold_its_seconds(tiny, write_recipe, tmp_path):
    """--window: a recipe's trial keeps timing past --steps until its steady steps hold the window's seconds; the
    result guard still reads the loss and metric after the planned steps, as every variant trained them."""
    out = tmp_path / "t.json"
    argv = [str(write_recipe(tiny)), "--steps", "2", "--warmup", "1", "--window", "0.3", "--json", str(out)]
    assert trial_main(argv) == 0
    result = Trial.model_validate_json(out.read_text())
    assert result.error is None and result.steps >= 2 and sum(result.step_times_s) >= 0.3
    assert len(result.step_losses) == 1 + result.warmup_cut + result.steps
    assert result.final_loss == pytest.approx(sum(result.step_losses[1:3]) / 2, rel=1e-5)
    assert result.val_accuracy is not None  # evaluated at the planned step, not at the window's end


def test_the_default_window_applies_where_steps_were_left_out():
    from argparse import Namespace

    from accel.cli.options import trial_steps

    for given, steps, window in [((None, None), 20, 1.0), ((5, None), 5, 0.0), ((None, 0.0), 20, 0.0)]:
        args = Namespace(steps=given[0], window=given[1])
        trial_steps(args, 20)
        assert (args.steps, args.window) == (steps, window)
    argv = trial_argv(Path("r.yaml"), TrialSettings(steps=3, warmup=1, window=2.5), Path("t.json"), "v", 0)
    assert argv[-2:] == ["--window", "2.5"]
    with pytest.raises(AccelError, match="timed window"):
        TrialSettings(steps=3, warmup=1, window=float("nan"))


def _rounds_bench(tmp_path, monkeypatch, speeds, rounds):
    """A bench of variants a, b, c through run_and_report, each trial's samples/s from `speeds[variant](round)`."""
    from accel.bench.variants import Variant

    def job(index, trial, variant, recipe, out, settings, cwd, zygotes):
        return Trial(variant=variant, trial=trial, index=index, samples_per_s=speeds[variant](trial))

    monkeypatch.setattr(runner, "_run_job", job)
    variants = [Variant(n, {"k": i}) for i, n in enumerate(speeds)]
    jobs = [(t, v.name, tmp_path / "r.yaml") for t in range(rounds.pilot) for v in variants]
    run = runner.BenchRun(variants, "a", "r.yaml", {}, TrialSettings(4, 1), rounds.pilot, rounds=rounds)
    console = Console(file=io.StringIO())
    report, _ = runner.run_and_report(run, jobs, tmp_path, console)
    return report, console.file.getvalue()


def test_a_bench_adds_rounds_for_an_undecided_comparison_until_it_decides(tmp_path, monkeypatch):
    from accel.bench.decide import Rounds

    # the machine swings 20% from round to round; b is 10% faster within every round, c the same as a but noisy
    swing = [1.0, 1.2, 0.85, 1.1, 0.9, 1.15, 0.95, 1.05] * 3
    noise = [1.04, 0.95, 1.03, 0.97, 1.02, 0.96, 1.01, 0.99] * 3
    speeds = {
        "a": lambda t: 100 * swing[t],
        "b": lambda t: 110 * swing[t] * (1.02 if t % 2 else 0.98),
        "c": lambda t: 100 * swing[t] * noise[t],
    }
    report, said = _rounds_bench(tmp_path, monkeypatch, speeds, Rounds(3, 20, 600.0, 0.05))
    rows = report.by_name
    assert rows["b"].verdict == Verdict.HELPED and rows["c"].verdict in (Verdict.NO_EFFECT, None)
    assert "undecided at +-5%" in said
    assert rows["a"].ok_trials > 3 and rows["a"].ok_trials == max(r.ok_trials for r in rows.values())
    assert report.settings.rounds == rows["a"].ok_trials and report.settings.looks[0] == 3
    indices = [t.index for r in rows.values() for t in r.trials]
    assert sorted(indices) == list(range(len(indices)))  # added rounds number on from the pilot's
    assert not report.interrupted


def test_a_fixed_number_of_trials_adds_no_round(tmp_path, monkeypatch):
    from accel.bench.decide import fixed_rounds

    speeds = {"a": lambda t: 100.0 + 7 * (t % 2), "b": lambda t: 101.0 - 7 * (t % 2), "c": lambda t: 100.0}
    report, said = _rounds_bench(tmp_path, monkeypatch, speeds, fixed_rounds(3))
    assert all(r.ok_trials == 3 for r in report.variants) and "undecided" not in said
    assert report.by_name["b"].verdict is None and report.by_name["b"].undecided == 0.03
