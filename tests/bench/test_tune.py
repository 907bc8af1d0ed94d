"""`accel tune`: the search on simulated measurements, then once for real through the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from accel.bench import tune as tune_module
from accel.bench.records import Trial, Verdict
from accel.bench.runner import TrialResults, TrialsStopped
from accel.bench.trial_process import TrialSettings
from accel.bench.tune import BATCH_KEY, WORKERS_KEY, Knob, TuneResult, build_knobs, table, tune, write_fragment
from accel.bench.tune.output import final_lines
from accel.cli import main
from accel.config.recipe import load_recipe, validate_recipe
from accel.devices import available_cpus
from accel.errors import AccelError


def simulated(seen: list):
    """A run_trials stand-in: samples/s grows with batch size up to 64 (then "OOM"); 1 worker is 1.5x faster."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            if skip is not None and skip(name, results):
                continue
            data = yaml.safe_load(path.read_text())["data"]
            batch, workers = data["batch_size"], data["loader"]["num_workers"]
            seen.append((batch, workers))
            if batch > 64:
                results.append(Trial(variant=name, trial=trial, error="torch.OutOfMemoryError: out of memory"))
                continue
            sps = batch * 10 * (1.5 if workers == 1 else 1.0) * (1 + 0.001 * trial)
            results.append(
                Trial(
                    variant=name,
                    trial=trial,
                    error=None,
                    samples_per_s=sps,
                    env={"device": "cpu (simulated)", "torch": "2.x"},
                )
            )
        return results

    return run_trials


def test_search_picks_measured_best_bounds_batch_and_reuses(tiny, tmp_path):
    seen: list = []
    fake = simulated(seen)
    base = validate_recipe(tiny)  # batch_size 16, num_workers auto
    knobs = [Knob(BATCH_KEY, [16, 32, 64, 128, 256], bounded=True), Knob(WORKERS_KEY, [0, 1])]
    settings = TrialSettings(steps=5, warmup=1)
    result = tune(base, knobs, tmp_path / "work", settings, trials=3, run_trials=fake)
    assert result.chosen == {BATCH_KEY: 64, WORKERS_KEY: 1}
    # 128 failed in the first round, so 256 never ran and 128 was not retried; the workers stage measured its
    # reference (64, auto) again beside its candidates instead of comparing with the batch stage's trials.
    assert set(seen) == {(16, "auto"), (32, "auto"), (64, "auto"), (128, "auto"), (64, 0), (64, 1)}
    assert seen.count((128, "auto")) == 1 and seen.count((64, "auto")) == 6 and seen.count((64, 1)) == 3
    assert seen[-9:-6] == [(64, "auto"), (64, 0), (64, 1)]  # interleaved: reference and candidates by turns
    notes = {(r.knob, r.value): r.note for r in result.rows}
    assert notes[(BATCH_KEY, 64)] == "chosen" and notes[(BATCH_KEY, 16)] == "current"
    assert notes[(BATCH_KEY, 128)].startswith("1 failed: torch.OutOfMemoryError")
    assert notes[(BATCH_KEY, 256)] == "not run (a smaller value failed)"
    assert json.loads((tmp_path / "work" / "tune.json").read_text())["chosen"] == {BATCH_KEY: 64, WORKERS_KEY: 1}

    fragment = write_fragment(result, tmp_path / "configs" / "tuned.yaml", base, "accel tune r.yaml", settings, 3)
    text = fragment.read_text()
    assert yaml.safe_load(text) == {"data": {"batch_size": 64, "loader": {"num_workers": 1}}}
    assert "# Written by `accel tune r.yaml` on " in text and "3 trial(s) in fresh processes, 5 timed steps" in text
    assert "data.batch_size: 64 (recipe had 16; 4.00x" in text and "re-check the learning rate" in text
    user = {k: v for k, v in tiny.items()} | {
        "base": "configs/tuned.yaml",
        "data": {"dataset": tiny["data"]["dataset"]},
    }
    (tmp_path / "user.yaml").write_text(yaml.safe_dump(user))
    tuned = load_recipe(tmp_path / "user.yaml")
    assert (tuned.data.batch_size, tuned.data.loader.num_workers) == (64, 1)
    console = Console(file=io.StringIO(), width=250)
    console.print(table(result))
    rendered = " ".join(console.file.getvalue().replace("│", "|").split())
    assert "| data.batch_size | 256 | n/a | n/a | n/a | | not run (a smaller value failed) |" in rendered
    assert "| data.batch_size | 64 | 640.6 [639.1, 642.2] | 4.00x [4.00, 4.00] | n/a | helped | chosen |" in rendered


def test_a_noise_level_win_keeps_the_current_value(tiny, tmp_path):
    fake = simulated([])
    result = tune(
        validate_recipe(tiny), [Knob(WORKERS_KEY, [0])], tmp_path, TrialSettings(5, 1), trials=3, run_trials=fake
    )
    assert result.chosen == {WORKERS_KEY: "auto"}  # 0 measured the same as auto: no reason to change
    one = tune(
        validate_recipe(tiny),
        [Knob(BATCH_KEY, [64], bounded=True)],
        tmp_path,
        TrialSettings(5, 1),
        trials=1,
        run_trials=fake,
    )
    assert one.chosen == {BATCH_KEY: 16}  # 4x faster, but one trial cannot tell a gain from a noisy moment
    assert [r.note for r in one.rows] == ["chosen", "not trusted: fewer than 2 trials"]


def test_default_knobs(tiny):
    base = validate_recipe(tiny)
    knobs = {k.key: k for k in build_knobs(base)}
    assert knobs[BATCH_KEY].values == [8, 16, 32, 64] and knobs[BATCH_KEY].bounded
    assert knobs[WORKERS_KEY].values == [n for n in (0, 1, 2, 4) if n <= available_cpus()]
    assert knobs["speedups.threads.intra_op"].values[-1] == available_cpus()
    only = build_knobs(base, batch_sizes="32,8", workers="", threads="", tries=["optim.lr=0.1,0.2"])
    assert [(k.key, k.values) for k in only] == [(BATCH_KEY, [32, 8]), ("optim.lr", [0.1, 0.2])]
    with pytest.raises(AccelError, match="positive integers"):
        build_knobs(base, batch_sizes="0,8")


@pytest.mark.slow
def test_tune_command_for_real(tiny, write_recipe, tmp_path, capsys):
    out, work = tmp_path / "tuned.yaml", tmp_path / "work"
    # 4096 is more than the training set holds, so it fails and bounds the search: 8192 is never run.
    argv = [
        "tune",
        str(write_recipe(tiny)),
        "--batch-sizes",
        "16,4096,8192",
        "--workers=",
        "--threads=",
        "--no-speedups",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--trials",
        "1",
        "--out",
        str(out),
        "--work",
        str(work),
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == str(out)
    table_text = captured.out.replace("│", " ")  # a narrow non-terminal console wraps cells: compare words
    assert "accel tune" in table_text and {"4096", "8192", "failed:", "smaller"} <= set(table_text.split())
    assert "chosen" not in table_text.split() and "beside" in table_text.split()  # nothing measured beside it
    assert "data.batch_size=8192 trial 0: skipped" in captured.err
    assert yaml.safe_load(out.read_text()) == {}  # the recipe's own batch size: nothing to change
    assert "data.batch_size: 16 (kept from the recipe: nothing else was measured beside it)" in out.read_text()
    trials = [json.loads(path.read_text()) for path in work.rglob("trials/*.json")]
    assert len(trials) == 2 and trials[0]["val_accuracy"] is None  # tune's trials evaluate nothing


def test_tune_rejects_nothing_to_do(tiny, write_recipe, capsys):
    argv = ["tune", str(write_recipe(tiny)), "--batch-sizes=", "--workers=", "--threads=", "--no-speedups"]
    assert main(argv) == 2
    assert "nothing to tune" in capsys.readouterr().err


def simulated_speedups(
    seen: list,
    has_conv: bool = True,
    compile_wall_s: float = 10.0,
    final_mean: float = 1.0,
    final_median_step: float = 1.0,
):
    """amp bf16 2x; channels_last noise; compile 1.5x per step but 100 s to compile; every trial takes 10 s (one
    that compiles `compile_wall_s`). In the final check, the tuned configuration runs `final_mean` times as fast by
    mean samples/s and `final_median_step` times by its median step (where they interact, not one by one)."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            if skip is not None and skip(name, results):
                continue
            speedups = yaml.safe_load(path.read_text())["speedups"]
            on = {k for k, v in speedups.items() if v.get("enabled", True)}
            seen.append((name, tuple(sorted(on))))
            sps = 100.0 * (2 if "amp" in on else 1) * (1.5 if "compile" in on else 1) * (1 + 0.001 * trial)
            sps *= 1 + 0.002 * ("channels_last" in on) * (-1) ** trial
            steady = None
            if out.name == "final":
                tuned = name == "tuned"
                steady = sps * (final_median_step if tuned else 1.0)
                sps *= final_mean if tuned else 1.0
            step = 16 / sps
            wall = compile_wall_s if "compile" in on else 10.0
            results.append(
                Trial(
                    variant=name,
                    trial=trial,
                    error=None,
                    samples_per_s=sps,
                    wall_s=wall,
                    median_step_samples_per_s=steady,
                    step_times_s=[step] * 4,
                    first_step_s=100.0 if "compile" in on else 1.0,
                    model_traits={"has_conv": has_conv, "has_attention": False, "repeated_blocks": False},
                    steps_per_epoch=10,
                    env={"device": "cpu (simulated)", "torch": "2.x"},
                )
            )
        return results

    return run_trials


def test_speedups_are_kept_only_when_they_help_and_repay_their_start_up(monkeypatch, tiny, tmp_path):
    seen: list = []
    fake = simulated_speedups(seen)
    monkeypatch.setenv("ACCEL_CPU_BF16", "1")
    tiny["speedups"] = {"channels_last": {}}  # the recipe has it on; it measures as noise, so off wins
    base = validate_recipe(tiny)
    knobs = [k for k in build_knobs(base, speedups=True) if k.speedup]
    assert [k.key for k in knobs] == [
        "speedups.amp",
        "speedups.channels_last",
        "speedups.attention",
        "speedups.optim",
        "speedups.compile",
    ]
    assert knobs[2].labels == ["off", "backend=flash"]  # the CUDA-only kernels are not candidates on a CPU
    assert knobs[4].labels == ["off", "on", "regional=true"]  # max-autotune: GPUs only
    result = tune(base, knobs, tmp_path, TrialSettings(5, 1), trials=3, final_check=True, run_trials=fake)
    assert result.labels["speedups.amp"] == "dtype=bf16" and result.chosen["speedups.amp"]["dtype"] == "bf16"
    assert result.labels["speedups.channels_last"] == "off"
    # compile: 1.5x, but 99 s more start-up is repaid after ~1,500 steps and the recipe runs 2 epochs x 10
    assert result.labels["speedups.compile"] == "off"
    notes = {(r.knob, r.label): r.note for r in result.rows}
    assert (
        notes[("speedups.compile", "on")].startswith("repays its start-up after")
        and "the run has 20" in notes[("speedups.compile", "on")]
    )
    assert notes[("speedups.compile", "regional=true")] == "not tried: the model has no repeated blocks"
    assert notes[("speedups.attention", "backend=flash")] == "not tried: the model has no attention modules"
    assert not any("regional" in name or "attention" in name for name, _ in seen)
    assert result.final.verdict == Verdict.HELPED and result.final.ratio.median == pytest.approx(2.0, rel=0.01)
    settings = TrialSettings(5, 1)
    text = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune r.yaml", settings, 3).read_text()
    assert yaml.safe_load(text)["speedups"]["channels_last"]["enabled"] is False
    assert "speedups.amp: dtype=bf16 (2.00x" in text and "Tuned vs the recipe as given" in text


def test_a_budget_leaves_the_knobs_that_do_not_fit(tiny, tmp_path):
    seen: list = []
    fake = simulated_speedups(seen)
    knobs = [
        Knob("speedups.compile", [{"enabled": False}, {"enabled": True}], speedup=True, labels=["off", "on"]),
        Knob(BATCH_KEY, [8, 32], bounded=True),
    ]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=2, budget_s=50, run_trials=fake)
    assert len(seen) == 4  # the compile stage (4 trials of 10 s) ran; the batch stage's 6 trials would not fit
    skipped = [r for r in result.rows if r.knob == BATCH_KEY]  # every candidate but the recipe's own 16
    assert [(r.label, r.note) for r in skipped] == [(b, "not measured: over the --budget") for b in ("8", "32")]
    assert BATCH_KEY not in result.chosen


def test_a_budget_that_fits_no_comparison_writes_a_fragment_saying_nothing_was_measured(tiny, tmp_path):
    fake = simulated_speedups([])
    knobs = [
        Knob(
            "speedups.channels_last",
            [{"enabled": False}, {"enabled": True}],
            speedup=True,
            labels=["off", "on"],
            needs=[None, "has_conv"],
        ),
        Knob(BATCH_KEY, [8, 32], bounded=True),
    ]
    base = validate_recipe(tiny)
    # the traits probe (one 10 s trial) is all that runs in 1 s, then every stage is over the budget
    result = tune(base, knobs, tmp_path, TrialSettings(5, 1), trials=2, budget_s=1, final_check=True, run_trials=fake)
    assert result.compared == [] and result.final is None
    text = write_fragment(
        result, tmp_path / "tuned.yaml", base, "accel tune r.yaml --budget 1s", TrialSettings(5, 1), 2
    ).read_text()
    assert "# Nothing was measured: no knob's candidates ran beside its reference within the --budget" in text
    assert "trial(s) in fresh processes" not in text and yaml.safe_load(text) == {}


def test_an_interrupt_ends_the_whole_search(tiny, tmp_path):
    stages = []

    def interrupted(jobs, out, settings, console=None, skip=None):  # Ctrl-C or SIGTERM in the stage's first trial
        stages.append(out)
        results = TrialResults()
        results.interrupted = True
        return results

    knobs = [Knob(BATCH_KEY, [8, 16], bounded=True), Knob(WORKERS_KEY, [0, 1])]
    with pytest.raises(KeyboardInterrupt):
        tune(validate_recipe(tiny), knobs, tmp_path / "work", TrialSettings(5, 1), trials=2, run_trials=interrupted)
    assert len(stages) == 1  # the workers stage never ran
    record = json.loads((tmp_path / "work" / "tune.json").read_text())  # says what happened, chooses nothing
    assert record["interrupted"] is True and record["chosen"] == {}


def test_a_trial_whose_script_never_logged_its_target_metric_ends_the_whole_search(tiny, tmp_path):
    stages = []

    def stopped(jobs, out, settings, console=None, skip=None):  # the runner stopped at the stage's first trial
        stages.append(out)
        results = TrialResults([Trial(variant="x", trial=0, error="logged no `val_loss`", unlogged_metric="val_loss")])
        results.stopped = "the script logged no `val_loss` (it logged nothing)"
        return results

    knobs = [Knob(BATCH_KEY, [8, 16], bounded=True), Knob(WORKERS_KEY, [0, 1])]
    with pytest.raises(TrialsStopped, match="logged no `val_loss`"):
        tune(validate_recipe(tiny), knobs, tmp_path / "work", TrialSettings(5, 1), trials=2, run_trials=stopped)
    assert len(stages) == 1  # the workers stage never ran
    record = json.loads((tmp_path / "work" / "tune.json").read_text())  # says what was measured, chooses nothing
    assert record["interrupted"] is True and record["chosen"] == {}


def test_tunes_table_to_a_file_or_a_pipe_is_not_cut_to_80_columns(tmp_path, capsys):
    from accel.bench.records import Interval
    from accel.bench.tune.rows import TuneRow
    from accel.bench.tune.search import TuneResult
    from accel.cli.tune import searched

    none = Interval(median=None, ci95=None)
    note = "the recipe's value, measured beside"
    row = TuneRow(
        knob="speedups.channels_last", value=None, label="off", samples_per_s=none, ratio=none, verdict=None, note=note
    )
    searched(lambda: TuneResult(rows=[row]), tmp_path)
    printed = capsys.readouterr().out  # captured: not a terminal
    assert "speedups.channels_last" in printed and note in printed


def test_an_interrupted_tune_command_writes_no_fragment(monkeypatch, tiny, write_recipe, tmp_path, capsys):
    def interrupted(*args, **kwargs):  # the search, stopped by Ctrl-C or SIGTERM (the test above)
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_module, "tune", interrupted)  # the command's entry into the search, not the runner
    out = tmp_path / "tuned.yaml"
    argv = [
        "tune",
        str(write_recipe(tiny)),
        "--batch-sizes",
        "8,16",
        "--workers",
        "0,1",
        "--threads=",
        "--no-speedups",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
    ]
    assert main(argv) == 130
    assert not out.exists()
    assert (
        f"interrupted: no fragment written (nothing chosen from a search cut short); the trials so far are "
        f"under {tmp_path / 'work'}" in capsys.readouterr().err
    )


def test_a_stage_ends_when_its_first_trials_show_the_rest_would_overrun_the_budget(tiny, tmp_path):
    seen: list = []
    fake = simulated_speedups(seen, compile_wall_s=100.0)
    knobs = [Knob("speedups.compile", [{"enabled": False}, {"enabled": True}], speedup=True, labels=["off", "on"])]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=2, budget_s=150, run_trials=fake)
    # off (10 s) then on (100 s): the second round (10 + 100 s more) would end at 220 s, so it is not run
    assert [name for name, _ in seen] == ["speedups.compile=off", "speedups.compile=on"]
    assert "speedups.compile" not in result.chosen or result.chosen["speedups.compile"]["enabled"] is False
    notes = [r.note for r in result.rows if r.knob == "speedups.compile"]
    assert notes and all(n.endswith("stage ended early: over the --budget") for n in notes)


JITTER = (0.06, -0.06, 0.02, -0.03, 0.04, -0.01, 0.03, -0.02, 0.01, 0.0)  # a round's share, by its index


def noisy_workers(seen: list, gain: float = 1.06, noisy_in: str | None = None):
    """A run_trials stand-in whose 1-worker trials run `gain` times as fast as the reference's, give or take
    JITTER's share of their round (only in the trials under a folder named `noisy_in`, if given): three rounds
    cannot tell 6% apart at 3%; each trial takes 10 s."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        jitter = JITTER if noisy_in in (None, Path(out).name) else (0.0,)
        for trial, name, path in jobs:
            if skip is not None and skip(name, results):
                continue
            workers = yaml.safe_load(path.read_text())["data"]["loader"]["num_workers"]
            seen.append((trial, workers))
            sps = 100.0 * (gain * (1 + jitter[trial % len(jitter)]) if workers == 1 else 1.0)
            results.append(
                Trial(variant=name, trial=trial, samples_per_s=sps, wall_s=10.0, step_times_s=[16 / sps] * 4)
            )
        return results

    return run_trials


def test_an_undecided_stage_adds_rounds_within_its_share_of_the_budget_and_reads_them_by_the_looks(tiny, tmp_path):
    knobs = [Knob(WORKERS_KEY, [1])]
    seen: list = []
    fixed = tune(
        validate_recipe(tiny), knobs, tmp_path / "a", TrialSettings(5, 1), trials=3, run_trials=noisy_workers(seen)
    )
    assert len(seen) == 6 and fixed.chosen == {WORKERS_KEY: "auto"}  # no budget: the trials as given, undecided
    assert [r.verdict for r in fixed.rows if r.value == 1] == [None]
    seen.clear()
    budget = tune(
        validate_recipe(tiny),
        knobs,
        tmp_path / "b",
        TrialSettings(5, 1),
        trials=3,
        budget_s=600,
        run_trials=noisy_workers(seen),
    )
    rounds = sorted({trial for trial, _ in seen})
    assert len(rounds) > 3 and len(seen) * 10 <= 600  # rounds added, within the budget
    (row,) = [r for r in budget.rows if r.value == 1]
    assert row.verdict == Verdict.HELPED and budget.chosen == {WORKERS_KEY: 1}
    assert rounds == list(range(len(rounds)))  # interleaved rounds, paired by their index
    head = write_fragment(budget, tmp_path / "tuned.yaml", validate_recipe(tiny), "accel tune", TrialSettings(5, 1), 3)
    assert f"each candidate ran 3 to {len(rounds)} trial(s)" in head.read_text()


def test_an_undecided_final_check_adds_rounds_with_what_the_budget_has_left(tiny, tmp_path):
    """timm's tune on an AMX Xeon ended at 7 of its 15 minutes with the final check "too few trials for a verdict"
    (1.13x [0.98, 1.31]): the final check now adds rounds as a stage does; with --trials given it says undecided."""
    knobs, settings, base = [Knob(WORKERS_KEY, [1])], TrialSettings(5, 1), validate_recipe(tiny)
    for add_rounds, verdict, said in ((True, Verdict.HELPED, "(helped)"), (False, None, "(undecided at +-3%: ")):
        seen: list = []
        fake = noisy_workers(seen, noisy_in="final")  # a clear stage, then a final check three rounds cannot tell
        result = tune(
            base,
            knobs,
            tmp_path / str(add_rounds),
            settings,
            trials=3,
            budget_s=1200,
            final_check=True,
            run_trials=fake,
            add_rounds=add_rounds,
        )
        assert result.chosen == {WORKERS_KEY: 1} and result.final.verdict == verdict
        assert said in final_lines(result, "recipe")[0]
        final_rounds = len(seen) - 6  # the stage's 3 rounds of 2
        assert (final_rounds > 6) is add_rounds and len(seen) * 10 <= 1200  # rounds past 3, within the budget


def test_each_stage_says_what_it_chose_the_trials_it_ran_and_the_budget_left(tiny, tmp_path):
    said = io.StringIO()
    knobs = [Knob(WORKERS_KEY, [1]), Knob(BATCH_KEY, [32], bounded=True)]
    tune(
        validate_recipe(tiny),
        knobs,
        tmp_path,
        TrialSettings(5, 1),
        trials=3,
        budget_s=900,
        console=Console(file=said, width=200),
        run_trials=noisy_workers([]),
    )
    lines = [line for line in said.getvalue().splitlines() if " trial(s)" in line]
    assert lines[0].startswith(f"{WORKERS_KEY}: chose {WORKERS_KEY}=1 after ")
    assert lines[1].startswith(f"{BATCH_KEY}: kept ") and len(lines) == 2
    assert all(" of the --budget left" in line for line in lines)


def test_trials_given_are_run_exactly_and_the_default_adds_rounds_while_undecided(
    monkeypatch, tiny, write_recipe, tmp_path
):
    asked = []
    monkeypatch.setattr(tune_module, "tune", lambda *args, **kwargs: asked.append((args[4], kwargs)) or TuneResult())
    for extra in ([], ["--trials", "3"]):
        assert main([*_tune_argv(write_recipe(tiny), tmp_path / "t.yaml", tmp_path / "work"), *extra]) == 0
    assert [(trials, kwargs["add_rounds"]) for trials, kwargs in asked] == [(3, True), (3, False)]


def test_a_stage_takes_an_equal_part_of_what_is_left_of_the_budget():
    from accel.bench.tune.budget import Budget

    budget = Budget(600.0, reserve=2)
    assert budget.stage_seconds(3) == pytest.approx(200.0, abs=1.0)
    budget.record([Trial(variant="a", trial=0, wall_s=100.0)] * 2)
    # 200 s spent; the final check's 2 trials of 100 s held back; two stages left share 200 s
    assert budget.stage_seconds(2) == pytest.approx(100.0, abs=1.0)
    assert Budget(None).stage_seconds(1) is None


def test_rounds_that_workers_ran_side_by_side_spend_the_budget_by_the_clock():
    from accel.bench.tune.budget import Budget, side_by_side

    def ran(start: float, worker: int) -> Trial:
        return Trial(variant=f"w{worker}", trial=0, wall_s=100.0, started_at=start, process_s=100.0)

    two_at_once = [ran(0.0, 0), ran(1.0, 1), ran(100.0, 0), ran(101.0, 1)]  # two workers, two rounds each: 201 s
    one_after_another = [ran(100.0 * i, 0) for i in range(4)]
    assert side_by_side(two_at_once) == pytest.approx(400 / 201)
    assert side_by_side(one_after_another) == 1.0 and side_by_side([Trial(variant="a", trial=0, wall_s=5.0)]) == 1.0
    budget = Budget(1000.0)
    budget.record(two_at_once)
    assert sum(budget.walls[""]) == pytest.approx(201.0)  # the clock's 201 s, not the 400 trial-seconds
    assert budget.fits([None] * 15) and not budget.fits([None] * 16)  # 50 s each, as they ran: 799 s left


def test_the_budget_keeps_back_the_final_checks_trials(tiny, tmp_path):
    seen: list = []
    knobs = [
        Knob("speedups.amp", [{"enabled": False}, {"dtype": "bf16"}], speedup=True, labels=["off", "bf16"]),
        Knob(BATCH_KEY, [16, 32], bounded=True),
    ]
    # 85 s: after amp's 4 trials (40 s) the batch stage's 2 would fit, but not with the final check's 4 after it
    result = tune(
        validate_recipe(tiny),
        knobs,
        tmp_path,
        TrialSettings(5, 1),
        trials=2,
        budget_s=85,
        final_check=True,
        run_trials=simulated_speedups(seen),
    )
    assert [r.note for r in result.rows if r.knob == BATCH_KEY] == ["not measured: over the --budget"]
    assert result.final.verdict == Verdict.HELPED and len(seen) == 4 + 4


def test_a_tuned_configuration_slower_than_the_recipe_is_not_written(tiny, tmp_path):
    fake = simulated_speedups([], final_mean=0.45)  # amp's 2x, but 0.9x the recipe once measured in the final check
    knobs = [Knob("speedups.amp", [{"enabled": False}, {"dtype": "bf16"}], speedup=True, labels=["off", "bf16"])]
    base = validate_recipe(tiny)
    result = tune(base, knobs, tmp_path, TrialSettings(5, 1), trials=2, final_check=True, run_trials=fake)
    assert result.final.verdict == Verdict.HURT and result.final.ratio.median == pytest.approx(0.9, rel=0.01)
    assert result.chosen == {} and result.final.reverted == {"speedups.amp": {"dtype": "bf16"}}
    text = write_fragment(
        result, tmp_path / "tuned.yaml", base, "accel tune r.yaml", TrialSettings(5, 1), 2
    ).read_text()
    assert yaml.safe_load(text) == {} and "the recipe stays as it is" in text


def test_a_model_without_convolutions_never_runs_channels_last(tiny, tmp_path):
    seen: list = []
    fake = simulated_speedups(seen, has_conv=False)
    knobs = [
        Knob(
            "speedups.channels_last",
            [{"enabled": False}, {"enabled": True}],
            speedup=True,
            labels=["off", "on"],
            needs=[None, "has_conv"],
        )
    ]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=2, run_trials=fake)
    assert {name for name, _ in seen} == {"speedups.channels_last=off"}  # the reference, to learn the traits
    assert [r.note for r in result.rows] == ["not tried: the model has no convolutions"]


def test_a_knob_the_recipe_does_not_set_starts_from_its_absence(tiny, tmp_path):
    seen: list = []
    fake = simulated(seen)
    base = validate_recipe(tiny)  # no `threads` speed-up: the reference is the recipe without one
    result = tune(
        base, [Knob("speedups.threads.intra_op", [1, 2])], tmp_path, TrialSettings(5, 1), trials=2, run_trials=fake
    )
    assert [r.label for r in result.rows] == ["null", "1", "2"]
    assert result.chosen == {"speedups.threads.intra_op": None}  # the simulated threads change nothing
    fragment = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune r.yaml", TrialSettings(5, 1), 2)
    assert yaml.safe_load(fragment.read_text()) == {}  # nothing changed, and no invalid `intra_op: null`
    # with another knob chosen, the final check runs the tuned configuration without the absent one's null
    knobs = [Knob("speedups.threads.intra_op", [1, 2]), Knob(WORKERS_KEY, [0, 1])]
    result = tune(base, knobs, tmp_path / "again", TrialSettings(5, 1), trials=2, final_check=True, run_trials=fake)
    assert result.chosen == {"speedups.threads.intra_op": None, WORKERS_KEY: 1}
    assert result.final.verdict == Verdict.HELPED


def test_a_gain_seen_only_in_the_mean_is_not_chosen(tiny, tmp_path):
    """The reference's trials each had a stalled step (mean 100 samples/s, median step 130); bf16 ran 130 in
    both readings. Its mean says helped, its median step says no effect: a stall, not a speed-up."""

    def fake(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            on = yaml.safe_load(path.read_text())["speedups"]["amp"].get("enabled", True)
            mean = (130.0 if on else 100.0) + trial
            results.append(
                Trial(
                    variant=name,
                    trial=trial,
                    error=None,
                    samples_per_s=mean,
                    median_step_samples_per_s=130.0 + trial / 10,
                    wall_s=10.0,
                )
            )
        return results

    tiny["speedups"] = {"amp": {"dtype": "bf16", "enabled": False}}
    knobs = [
        Knob(
            "speedups.amp",
            [{"dtype": "bf16", "enabled": False}, {"dtype": "bf16", "enabled": True}],
            speedup=True,
            labels=["off", "bf16"],
        )
    ]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=3, run_trials=fake)
    assert result.labels["speedups.amp"] == "off"
    bf16 = next(r for r in result.rows if r.label == "bf16")
    assert bf16.verdict == Verdict.HELPED and bf16.median_step_ratio.median == pytest.approx(1.0)
    assert bf16.note.startswith("faster on average but not by median step times (1.00x")


def test_a_tuned_configuration_slower_by_its_median_step_is_not_written(tiny, tmp_path):
    # in the final check the tuned configuration's mean equals the recipe's, its median step is 0.9x
    fake = simulated_speedups([], final_mean=0.5, final_median_step=0.45)
    knobs = [Knob("speedups.amp", [{"enabled": False}, {"dtype": "bf16"}], speedup=True, labels=["off", "bf16"])]
    result = tune(
        validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=2, final_check=True, run_trials=fake
    )
    assert result.final.verdict == Verdict.NO_EFFECT and result.final.median_step_verdict == Verdict.HURT
    assert result.chosen == {} and result.final.reverted == {"speedups.amp": {"dtype": "bf16"}}
    console = Console(file=io.StringIO(), width=250)
    console.print(table(result))
    assert "by median steps: hurt" in console.file.getvalue()


def test_a_speed_up_that_moves_the_training_loss_is_not_chosen(tiny, tmp_path):
    """A 2x speed-up whose training loss went from 0.5 to 0.9 (a broken kernel, a dtype that diverges) is passed
    over; a batch size that moves the loss as much is chosen: a larger batch trains differently by design."""

    def fake(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            recipe = yaml.safe_load(path.read_text())
            fast = recipe["speedups"]["amp"].get("enabled", True) or recipe["data"]["batch_size"] == 32
            results.append(
                Trial(
                    variant=name,
                    trial=trial,
                    error=None,
                    wall_s=10.0,
                    samples_per_s=(200.0 if fast else 100.0) + trial,
                    final_loss=(0.9 if fast else 0.5) + trial / 100,
                )
            )
        return results

    tiny["speedups"] = {"amp": {"dtype": "bf16", "enabled": False}}
    knobs = [
        Knob(
            "speedups.amp",
            [{"dtype": "bf16", "enabled": False}, {"dtype": "bf16", "enabled": True}],
            speedup=True,
            labels=["off", "bf16"],
        ),
        Knob(BATCH_KEY, [16, 32], bounded=True),
    ]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=3, run_trials=fake)
    assert result.labels["speedups.amp"] == "off" and result.chosen[BATCH_KEY] == 32
    bf16 = next(r for r in result.rows if r.label == "bf16")
    assert bf16.verdict == Verdict.HELPED and bf16.note.startswith("faster, but its training loss moved beyond noise")


def test_the_fragment_holds_only_what_differs_from_the_recipe(tiny, tmp_path):
    fake = simulated_speedups([])
    tiny["speedups"] = {"compile": {"enabled": False}}  # off in the recipe, and found best off: nothing to write
    base = validate_recipe(tiny)
    knobs = [k for k in build_knobs(base, speedups=True) if k.key in ("speedups.compile", "speedups.optim")]
    result = tune(base, knobs, tmp_path, TrialSettings(5, 1), trials=2, run_trials=fake)
    assert set(result.chosen) == {"speedups.compile", "speedups.optim"}  # both off: optim as absent, compile as set
    text = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune r.yaml", TrialSettings(5, 1), 2)
    assert yaml.safe_load(text.read_text()) == {}


def test_a_busy_machine_is_said_first_in_the_fragment_and_tune_json(tiny, tmp_path):
    base, seen = validate_recipe(tiny), []
    fake = simulated(seen)
    busy = {"wall_s": 10.0, "cores": 2, "own_cpu_s": 9.0, "others_cpu_s": 8.0, "steal_s": 0.0}
    busy |= {"others_share": 0.4, "load_avg_1m": 3.2}

    def beside_a_busy_process(jobs, out, settings, console=None, skip=None):
        return [t.updated(load=busy) for t in fake(jobs, out, settings, console, skip)]

    result = tune(
        base, [Knob(WORKERS_KEY, [0, 1])], tmp_path / "work", TrialSettings(5, 1), 2, run_trials=beside_a_busy_process
    )
    lines = write_fragment(result, tmp_path / "t.yaml", base, "accel tune r.yaml", TrialSettings(5, 1), 2).read_text()
    assert lines.splitlines()[1].startswith("# BUSY MACHINE: The machine was busy during 6 of 6 trials: other ")
    assert "40% of the 2 core(s)" in lines
    assert json.loads((tmp_path / "work" / "tune.json").read_text())["busy"].startswith("The machine was busy")


def test_tune_never_chooses_from_a_verdict_measured_on_a_busy_machine(tiny, tmp_path):
    base, seen = validate_recipe(tiny), []
    fake = simulated(seen)  # 1 worker is 1.5x faster
    busy = {"wall_s": 10.0, "cores": 2, "own_cpu_s": 9.0, "others_cpu_s": 8.0, "steal_s": 0.0}
    busy |= {"others_share": 0.4, "load_avg_1m": 3.2}

    def one_worker_beside_a_busy_process(jobs, out, settings, console=None, skip=None):
        done = fake(jobs, out, settings, console, skip)
        return [t.updated(load=busy) if t.variant.endswith("num_workers=1") and t.trial == 0 else t for t in done]

    result = tune(
        base,
        [Knob(WORKERS_KEY, [0, 1])],
        tmp_path / "work",
        TrialSettings(5, 1),
        2,
        run_trials=one_worker_beside_a_busy_process,
    )
    assert result.chosen.get(WORKERS_KEY) != 1
    row = next(r for r in result.rows if r.value == 1)
    assert row.verdict is None and row.ratio.median == pytest.approx(1.5, rel=0.01)
    assert row.note == "not chosen: no verdict, the machine was busy during the trials (others took 40% of the cores)"


def test_a_candidate_whose_trials_failed_on_a_busy_machine_reads_failed_not_unjudged(tiny, tmp_path):
    base, fake = validate_recipe(tiny), simulated([])
    busy = {"wall_s": 10.0, "cores": 2, "own_cpu_s": 9.0, "others_cpu_s": 8.0, "steal_s": 0.0}
    busy |= {"others_share": 0.4, "load_avg_1m": 3.2}

    def one_worker_fails_beside_a_busy_process(jobs, out, settings, console=None, skip=None):
        done = fake(jobs, out, settings, console, skip)
        gone = dict(error="RuntimeError: out of memory", samples_per_s=None, median_step_samples_per_s=None)
        return [
            t.updated(load=busy, **gone) if t.variant.endswith("num_workers=1") else t.updated(load=busy) for t in done
        ]

    settings = TrialSettings(5, 1)
    result = tune(
        base,
        [Knob(WORKERS_KEY, [0, 1])],
        tmp_path / "work",
        settings,
        2,
        run_trials=one_worker_fails_beside_a_busy_process,
    )
    assert next(r for r in result.rows if r.value == 1).note == "2 failed: RuntimeError: out of memory"
    text = write_fragment(result, tmp_path / "t.yaml", base, "accel tune r.yaml", settings, 2).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"# {WORKERS_KEY}:"))
    assert "0 not chosen: no verdict, the machine was busy" in line and "1 not chosen" not in line  # 1 failed


def test_a_value_kept_for_want_of_a_verdict_says_so_in_the_fragment(tiny, tmp_path):
    # 1 worker ran 1.5x faster, but beside a busy process: the kept value was never judged against it
    base, fake = validate_recipe(tiny), simulated([])
    busy = {"wall_s": 10.0, "cores": 2, "own_cpu_s": 9.0, "others_cpu_s": 8.0, "steal_s": 0.0}
    busy |= {"others_share": 0.4, "load_avg_1m": 3.2}

    def one_worker_beside_a_busy_process(jobs, out, settings, console=None, skip=None):
        done = fake(jobs, out, settings, console, skip)
        return [t.updated(load=busy) if t.variant.endswith("num_workers=1") else t for t in done]

    settings = TrialSettings(5, 1)
    result = tune(
        base, [Knob(WORKERS_KEY, [0, 1])], tmp_path / "work", settings, 2, run_trials=one_worker_beside_a_busy_process
    )
    text = write_fragment(result, tmp_path / "t.yaml", base, "accel tune r.yaml", settings, 2).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"# {WORKERS_KEY}:"))
    assert "nothing measurably beat" not in line
    assert "1 not chosen: no verdict, the machine was busy during the trials (others took 40% of the cores)" in line


def test_a_candidate_whose_trials_ran_at_two_speeds_says_so_in_its_row(tiny, tmp_path):
    fake = simulated([])  # 1 worker is 1.5x faster

    def one_slow_trial(jobs, out, settings, console=None, skip=None):
        done = fake(jobs, out, settings, console, skip)
        slow = [t.variant.endswith("num_workers=1") and t.trial == 0 for t in done]
        return [t.updated(samples_per_s=t.samples_per_s / 2) if s else t for t, s in zip(done, slow)]

    result = tune(
        validate_recipe(tiny), [Knob(WORKERS_KEY, [0, 1])], tmp_path, TrialSettings(5, 1), 2, run_trials=one_slow_trial
    )
    row = next(r for r in result.rows if r.value == 1)
    assert row.note.endswith("unsteady: trials 120-240 samples/s"), row.note
    assert all("unsteady" not in r.note for r in result.rows if r.value != 1)


def _files(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _tune_argv(recipe, out, work) -> list[str]:
    knobs = ["--batch-sizes", "8,16", "--workers=", "--threads=", "--no-speedups"]
    return ["tune", str(recipe), *knobs, "--out", str(out), "--work", str(work)]


@pytest.mark.parametrize(
    "case, said",
    [
        ("the recipe", "names the recipe ("),
        ("its base fragment", "names a `base:` file of the recipe ("),
        ("a user's file", "already exists and was not written by `accel tune`; tune never replaces such a file"),
        ("under a file", "is a file, not a folder"),
        ("a folder", "is a folder; tune writes one YAML file there"),
    ],
)
def test_tune_refuses_an_out_it_must_not_replace_before_the_search(
    monkeypatch, tiny, write_recipe, tmp_path, capsys, case, said
):
    def search(*args, **kwargs):
        raise AssertionError("the search started")

    monkeypatch.setattr(tune_module, "tune", search)
    fragment = write_recipe("# Written by `accel tune r.yaml` on 2024-01-01 10:00.\ndata:\n  batch_size: 8\n", "t.yaml")
    recipe = write_recipe({"base": fragment.name, **tiny})
    (tmp_path / "notes.yaml").write_text("my: own\n")
    (tmp_path / "folder").mkdir()
    out = {
        "the recipe": recipe,
        "its base fragment": fragment,
        "a user's file": tmp_path / "notes.yaml",
        "under a file": tmp_path / "notes.yaml" / "tuned.yaml",
        "a folder": tmp_path / "folder",
    }[case]
    before = _files(tmp_path)
    assert main(_tune_argv(recipe, out, tmp_path / "work")) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert _files(tmp_path) == before  # nothing written, nothing replaced, no work folder


def test_tune_replaces_a_fragment_an_earlier_tune_wrote(monkeypatch, tiny, write_recipe, tmp_path, capsys):
    monkeypatch.setattr(tune_module, "tune", lambda *args, **kwargs: tune_module.TuneResult())
    old = write_recipe("# Written by `accel tune r.yaml` on 2024-01-01 10:00.\ndata:\n  batch_size: 8\n", "t.yaml")
    assert main(_tune_argv(write_recipe(tiny), old, tmp_path / "work")) == 0
    assert old.read_text().startswith("# Written by `accel tune ") and yaml.safe_load(old.read_text()) == {}


def test_tune_json_holds_no_bare_nan(tiny, tmp_path):
    def with_nan(jobs, out, settings, console=None, skip=None):
        results = simulated([])(jobs, out, settings, console, skip)
        return [r.updated(env={"device": "cpu (simulated)", "peak_flop_per_s": float("nan")}) for r in results]

    knobs = [Knob(BATCH_KEY, [16, 32], bounded=True)]
    tune(
        validate_recipe(tiny), knobs, tmp_path / "work", TrialSettings(steps=5, warmup=1), trials=2, run_trials=with_nan
    )

    def refuse(constant):
        raise AssertionError(f"tune.json holds a bare {constant}")

    data = json.loads((tmp_path / "work" / "tune.json").read_text(), parse_constant=refuse)
    assert data["env"]["peak_flop_per_s"] is None and data["chosen"] == {BATCH_KEY: 32}


@pytest.mark.parametrize(
    "option, said",
    [
        (["--timeout", "nan"], "error: --timeout must be a positive, finite number of seconds, got nan"),
        (["--budget", "nan"], "argument --budget: the budget must be a positive, finite duration, got `nan`"),
        (["--budget", "infm"], "argument --budget: the budget must be a positive, finite duration, got `infm`"),
    ],
)
def test_tune_refuses_a_timeout_or_budget_that_is_not_a_number(
    monkeypatch, tiny, write_recipe, tmp_path, capsys, option, said
):
    monkeypatch.setattr(tune_module, "tune", lambda *args, **kwargs: pytest.fail("the search started"))
    argv = ["tune", str(write_recipe(tiny)), "--no-speedups", "--work", str(tmp_path / "work"), *option]
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own refusal of a value its type rejects
        code = exit.code
    assert code == 2 and said in capsys.readouterr().err and not (tmp_path / "work").exists()


OPTIM_KNOB = Knob(
    "speedups.optim",
    [{"enabled": False}, {"impl": "fused", "enabled": True}, {"impl": "for_loop", "enabled": True}],
    speedup=True,
    labels=["off", "impl=fused", "impl=for_loop"],
)


def test_a_candidate_the_conflict_rule_refuses_is_recorded_refused_without_a_trial(tiny, tmp_path):
    tiny["optim"] = {"name": "muon"}  # Muon with AdamW: no fused kernel in torch
    seen: list = []
    result = tune(
        validate_recipe(tiny), [OPTIM_KNOB], tmp_path, TrialSettings(5, 1), trials=2, run_trials=simulated(seen)
    )
    rows = {r.label: r for r in result.rows}
    assert rows["impl=fused"].note.startswith(
        "refused, not run: `speedups.optim`: MuonWithAdamW has no fused kernel for its parameters here"
    )
    assert rows["impl=fused"].samples_per_s.median is None and rows["impl=fused"].verdict is None
    assert len(seen) == 4 and rows["impl=for_loop"].samples_per_s.median is not None  # off and for_loop, twice each
    written = json.loads((tmp_path / "tune.json").read_text())["rows"]
    assert any(r["label"] == "impl=fused" and r["note"].startswith("refused, not run") for r in written)
    assert not any("impl=fused" in path.name for path in tmp_path.rglob("*.yaml"))  # no trial input written


def test_a_candidate_is_refused_only_for_what_it_adds(tiny, tmp_path):
    seen: list = []  # SGD has a fused kernel on the CPU: nothing to refuse
    result = tune(
        validate_recipe(tiny), [OPTIM_KNOB], tmp_path, TrialSettings(5, 1), trials=2, run_trials=simulated(seen)
    )
    assert len(seen) == 6 and not any(r.note.startswith("refused") for r in result.rows)


def test_a_kept_value_says_whether_anything_ran_beside_it_and_a_scripts_null_is_its_own_choice():
    from accel.bench.records import Interval
    from accel.bench.tune.output import choice_line
    from accel.bench.tune.rows import TuneRow
    from accel.bench.tune.search import TuneResult

    def row(knob, value):
        return TuneRow(
            knob=knob,
            value=value,
            label=str(value),
            samples_per_s=Interval(),
            ratio=Interval(median=1.0),
            verdict=None,
            note="",
        )

    result = TuneResult(
        chosen={"optimizer": None, "data.batch_size": 32}, rows=[row("optimizer", None), row("data.batch_size", 32)]
    )
    plain = {"optimizer": None, "data": {"batch_size": 16}}
    kept = choice_line(result, plain, "optimizer", None, "script")
    assert kept == "optimizer: the script's own (kept from the script: nothing else was measured beside it)"
    beside = row("optimizer", "adamw").model_copy(update={"samples_per_s": Interval(median=90.0)})
    result.rows.append(beside)
    kept = choice_line(result, plain, "optimizer", None, "script")
    assert kept == "optimizer: the script's own (kept from the script: nothing measurably beat it)"
    assert choice_line(result, plain, "data.batch_size", 32, "script").startswith("data.batch_size: 32 (script had 16;")


def test_a_candidate_the_budget_cut_before_it_ran_says_so_not_that_a_smaller_value_failed(tiny, tmp_path):
    fake = simulated_speedups([], compile_wall_s=100.0)
    values = [{"enabled": False}, {"enabled": True}, {"enabled": True, "regional": True}]
    knobs = [Knob("speedups.compile", values, speedup=True, labels=["off", "on", "regional=true"])]
    result = tune(validate_recipe(tiny), knobs, tmp_path, TrialSettings(5, 1), trials=2, budget_s=150, run_trials=fake)
    notes = {r.label: r.note for r in result.rows if r.knob == "speedups.compile"}
    assert notes["regional=true"] == "not run; stage ended early: over the --budget"


def test_tune_reads_its_candidates_by_the_benchs_one_rule(tiny, tmp_path):
    """A candidate 3% faster under 10% noise a trial: the rule's interval cannot decide at 3%, so tune keeps the
    current value and says why, as a bench would read the same trials (accel/bench/decide.py)."""
    noise = {0: 1.10, 1: 0.92, 2: 1.01}

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            workers = yaml.safe_load(path.read_text())["data"]["loader"]["num_workers"]
            sps = 100 * (1.03 if workers == 1 else 1.0) * (noise[trial] if workers == 1 else 1 / noise[trial])
            results.append(Trial(variant=name, trial=trial, samples_per_s=sps, env={"device": "cpu", "torch": "2"}))
        return results

    result = tune(
        validate_recipe(tiny), [Knob(WORKERS_KEY, [1])], tmp_path, TrialSettings(5, 1), trials=3, run_trials=run_trials
    )
    assert result.chosen == {WORKERS_KEY: "auto"}
    (row,) = [r for r in result.rows if r.value == 1]
    assert row.verdict is None and row.note.startswith("not chosen: no verdict, undecided at +-3%")
