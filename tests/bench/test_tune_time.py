"""`accel tune --objective time`: the search by time to a target on simulated learning curves, its parts, and once
for real through the CLI on a tiny language model."""

from __future__ import annotations

import io
import json
import math

import pytest
import yaml
from rich.console import Console

from accel.bench.knobs import BATCH_KEY, LR_KEY, OPTIMIZER_KEY, lr_for_batch
from accel.bench.pruner import pruned
from accel.bench.records import Interval, Trial, Verdict
from accel.bench.report import verdict_lines
from accel.bench.runner import with_deadline
from accel.bench.summary import summarize
from accel.bench.target import Target, parse_target, time_to
from accel.bench.trial_process import TrialSettings
from accel.bench.tune import Knob, Objective, levers, table, time_knobs, tune, write_fragment
from accel.bench.tune.lr_range import LAG, propose, rates
from accel.bench.tune.objective import reached_by
from accel.bench.tune.output import final_lines
from accel.bench.tune.rows import FinalCheck
from accel.bench.tune.search import TuneResult
from accel.bench.variants import Variant
from accel.cli import main
from accel.config.recipe import validate_recipe
from tests.optimizers.test_optim_muon import TINY_LM

BEST_LR = 0.004  # the simulated model learns fastest at this rate


def learning(optim: str, lr: float, batch: int, final: str | None = None) -> float:
    """Loss drop per sample: Muon 1.6x AdamW, best at BEST_LR, a larger batch a little less per sample."""
    per_sample = 1e-3 * (1.6 if optim == "muon" else 1.0) * math.exp(-(math.log10(lr / BEST_LR) ** 2))
    return per_sample * (32 / batch) ** 0.1 * (1.5 if final == "tuned-interacts-badly" else 1.0)


def simulated_learning(seen: list, final_slower: bool = False):
    """A run_trials stand-in: every step costs batch/100 s, the loss falls from 3.0 with the samples seen at the
    rate `learning` gives, ten evaluations a run. A `lr_range` schedule gives a U-shaped loss with its bottom
    at 10 x BEST_LR."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            if skip is not None and skip(name, results):
                continue
            recipe = yaml.safe_load(path.read_text())
            optim, batch = recipe["optim"], recipe["data"]["batch_size"]
            seen.append((out.name, name, optim["name"], optim["lr"], batch, settings.target))
            if recipe["schedule"]["name"] == "lr_range":
                lrs = rates(optim["lr"], settings.steps + settings.warmup)
                losses = [3 + math.log10(lr / (10 * BEST_LR)) ** 2 for lr in lrs]
                results.append(Trial(variant=name, trial=trial, samples_per_s=1.0, wall_s=5.0, step_losses=losses))
                continue
            slow = final_slower and out.name == "final" and name == "tuned"
            drop = learning(optim["name"], optim["lr"], batch) * (0.5 if slow else 1.0) * (1 + 0.01 * trial)
            own = with_deadline(settings, trial, name, results)  # as the runner gives each trial its deadline
            results.append(_to_target(name, trial, own, drop, batch, 100.0, start=2.0, eval_s=0.5))
        return results

    return run_trials


@pytest.fixture
def lm_base() -> dict:
    return {**TINY_LM, "optim": {"name": "adamw", "lr": 0.001}, "data": {**TINY_LM["data"], "batch_size": 32}}


def time_settings(base) -> TrialSettings:
    return TrialSettings(steps=59, warmup=1, evaluate=True, samples=60 * base.data.batch_size, eval_batches=4)


def test_muon_beside_a_recipes_fused_kernel_carries_impl_auto(lm_base):
    from accel.bench.tune.search import _variant

    base = validate_recipe({**lm_base, "speedups": {"optim": {"impl": "fused"}}})
    (muon,) = [k for k in time_knobs(base) if k.key == OPTIMIZER_KEY]
    overrides = _variant(muon, "muon", {}, base.dump()).overrides
    assert overrides[OPTIMIZER_KEY] == "muon" and overrides["speedups.optim"]["impl"] == "auto"
    off = {"speedups.optim": {"enabled": False}}  # chosen off before it: nothing to carry
    assert _variant(muon, "muon", off, base.dump()).overrides == {**off, OPTIMIZER_KEY: "muon"}


def test_time_objective_picks_muon_the_proposed_rate_and_a_batch_with_its_rate(lm_base, tmp_path):
    seen: list = []
    base = validate_recipe(lm_base)
    knobs = time_knobs(base)
    assert [k.key for k in knobs] == [OPTIMIZER_KEY, LR_KEY, BATCH_KEY] and knobs[2].values == [16, 32, 64]
    result = tune(
        base,
        knobs,
        tmp_path,
        time_settings(base),
        trials=3,
        final_check=True,
        run_trials=simulated_learning(seen),
        objective=Objective("time"),
    )
    # the target: where the recipe as given ended its run, the worst of its three trials (trial 0 learns least)
    assert result.target == f"val_loss<={3.0 - learning('adamw', 0.001, 32) * 60 * 32:g}"
    first = [s for s in seen if s[0] == f"0-{OPTIMIZER_KEY}"]
    assert {s[5] for s in first} == {None}  # the first stage records curves: no target yet
    assert all(s[5] is not None for s in seen if s[0] not in (f"0-{OPTIMIZER_KEY}", "range-test"))
    # the range test ran once, on Muon (chosen before it), and its proposal is a tenth of the lowest loss's rate
    tested = [s for s in seen if s[0] == "range-test"]
    assert len(tested) == 1 and tested[0][2] == "muon"
    assert result.chosen[OPTIMIZER_KEY] == "muon"
    assert result.chosen[LR_KEY] == pytest.approx(BEST_LR, rel=0.1) or BATCH_KEY in result.chosen
    # the batch stage carries the rate: half the batch, the rate over sqrt(2)
    batch_rows = {r.value: r for r in result.rows if r.knob == BATCH_KEY}
    assert "(optim.lr=" in batch_rows[16].label and "(optim.lr=" not in batch_rows[32].label
    assert result.final is not None and result.final.time_ratio.median < 0.7 and not result.final.slower
    assert result.final.reached == {"tuned": "3/3", "recipe as given": "3/3"}

    console = Console(file=io.StringIO(), width=250)
    console.print(table(result))
    rendered = " ".join(console.file.getvalue().replace("│", "|").split())
    assert f"time to {result.target}" in rendered and "range test: loss lowest at lr" in rendered
    settings = time_settings(base)
    text = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune lm.yaml --objective time", settings, 3)
    fragment = text.read_text()
    assert yaml.safe_load(fragment)["optim"]["name"] == "muon"
    assert f"Objective: the wall time from process start to {result.target}" in fragment
    assert "the time to the target" in fragment
    assert json.loads((tmp_path / "tune.json").read_text())["target"] == result.target


def test_a_tuned_configuration_slower_to_the_target_is_reverted(lm_base, tmp_path):
    base = validate_recipe(lm_base)
    result = tune(
        base,
        [time_knobs(base)[0]],
        tmp_path,
        time_settings(base),
        trials=3,
        final_check=True,
        run_trials=simulated_learning([], final_slower=True),
        objective=Objective("time"),
    )
    assert result.final.slower and result.chosen == {} and result.final.reverted[OPTIMIZER_KEY] == "muon"


def test_a_given_target_is_used_from_the_first_stage(lm_base, tmp_path):
    seen: list = []
    base = validate_recipe(lm_base)
    target = Target("val_loss", 2.0)
    tune(
        base,
        [time_knobs(base)[0]],
        tmp_path,
        time_settings(base),
        trials=2,
        run_trials=simulated_learning(seen),
        objective=Objective("time", target),
    )
    assert {s[5] for s in seen} == {"val_loss=2.0"}


@pytest.mark.parametrize("prune", [True, False])
def test_a_candidate_that_cannot_be_sooner_is_stopped_short_and_what_that_saved_is_said(lm_base, tmp_path, prune):
    seen: list = []
    base = validate_recipe(lm_base)
    slow = 4e-5  # a hundredth of the best rate: it learns 2% as fast, and would never reach the target
    result = tune(
        base,
        [Knob(LR_KEY, [slow], bounded=True)],
        tmp_path,
        time_settings(base),
        trials=2,
        run_trials=simulated_learning(seen),
        objective=Objective("time", Target("val_loss", 2.0), prune=prune),
    )
    # the reference first in each round, though the candidates are in ascending order: its time is their deadline
    assert [s[3] for s in seen] == [0.001, slow, 0.001, slow]
    row = next(r for r in result.rows if r.value == slow)
    assert result.chosen == {LR_KEY: 0.001} and row.target_reached == 0
    data = json.loads((tmp_path / "tune.json").read_text())
    if not prune:
        assert not result.pruned and "pruned" not in row.note and "pruned" not in data
        return
    reference = next(r for r in result.rows if r.value == 0.001)
    assert "pruned in 2 of 2: it could not be sooner" in row.note and "pruned" not in reference.note
    stopped = [t for t in result.ran if t.pruned]
    assert len(stopped) == 2 and all(len(t.target_evals) == 4 for t in stopped)  # at its fourth evaluation
    assert "at its recent pace it would reach val_loss<=2" in stopped[0].pruned
    assert data["pruned"] == {"trials": 2, "saved_s": pytest.approx(result.saved_s, abs=0.1)}
    assert result.pruned_line().startswith("Pruned: 2 of 4 trials to the target stopped once they could not be")


def ladder_search(lm_base: dict, tmp_path, seen: list):
    """A learning rate searched as a ladder from 5e-4, half and twice, on the simulation (best at 8x)."""
    base = validate_recipe({**lm_base, "optim": {"name": "adamw", "lr": 0.0005}})
    return tune(
        base,
        [Knob(LR_KEY, [0.00025, 0.001], ladder=2.0)],
        tmp_path,
        time_settings(base),
        trials=3,
        run_trials=simulated_learning(seen),
        objective=Objective("time", Target("val_loss", 2.5)),
    )


def test_a_learning_rate_that_wins_at_the_end_of_its_ladder_is_taken_a_step_further_while_it_wins(lm_base, tmp_path):
    seen: list = []
    result = ladder_search(lm_base, tmp_path, seen)
    # 1e-3 wins at the top of its candidates, then 2e-3 against it; 4e-3 reaches the target at the same one of the
    # simulation's ten evaluations as 2e-3 (no measurable effect), so the ladder stops there
    stages = {where: sorted({lr for w, _, _, lr, _, _ in seen if w == where}) for where, *_ in seen}
    assert stages == {
        "0-optim.lr": [0.00025, 0.0005, 0.001],
        "0-optim.lr-2": [0.001, 0.002],
        "0-optim.lr-3": [0.002, 0.004],
    }
    assert result.chosen == {LR_KEY: 0.002}
    assert [(r.label, r.note) for r in result.rows if r.value in (0.002, 0.004)] == [
        ("0.002", "chosen"),  # against 1e-3
        ("0.002", "chosen"),  # kept against 4e-3
        ("0.004", ""),
    ]


def test_the_range_test_proposes_a_tenth_of_the_lowest_losses_rate():
    lrs = rates(1e-3, 60)
    assert lrs[0] == pytest.approx(1e-3 / 30) and lrs[-1] == pytest.approx(1e-3 * 30)
    losses = [3 + math.log10(lr / 4e-3) ** 2 for lr in lrs]
    at, proposed = propose(losses, lrs)
    assert at == pytest.approx(4e-3, rel=0.25) and proposed == pytest.approx(at / 10)
    # a loss that blows up ends the reading: the bottom before it counts, not a lucky value after it
    blown = [3.0 - 0.01 * i for i in range(30)] + [50.0] * 10 + [0.1] + [math.nan] * 19
    at, _ = propose(blown, lrs)
    assert at == lrs[29 - LAG]
    assert propose([math.nan] * 3, lrs[:3]) is None


def test_the_learning_rate_scales_with_the_batch_size():
    plain = {"optim": {"name": "adamw", "lr": 0.002}, "data": {"batch_size": 32}}
    assert lr_for_batch(32, {}, plain) == {LR_KEY: 0.002}  # the reference keeps its rate exactly
    assert lr_for_batch(128, {}, plain) == {LR_KEY: 0.004}  # adaptive: by the square root
    assert lr_for_batch(64, {LR_KEY: 0.01, OPTIMIZER_KEY: "sgd"}, plain) == {LR_KEY: 0.02}  # SGD: linearly


def test_the_default_target_is_the_worst_end_of_the_reference_curves():
    def ending(value: float, metric: str) -> Trial:
        return Trial(
            samples_per_s=1.0, val_metric_name=metric, target_evals=[{"step": 9, "wall_s": 1.0, "value": value}]
        )

    assert reached_by([ending(2.1, "val_loss"), ending(2.3, "val_loss")]) == Target("val_loss", 2.3)
    assert reached_by([ending(0.91, "val_accuracy"), ending(0.9, "val_accuracy")]) == Target("val_accuracy", 0.9)


def test_time_to_target_ratio_is_read_by_the_one_rule_and_counts_a_trial_that_never_got_there():
    def reached(name: str, seconds: float | None, trial: int) -> Trial:
        evals = [{"step": 1, "wall_s": 1.0, "value": 1.0}]
        return Trial(variant=name, trial=trial, samples_per_s=1.0, time_to_target_s=seconds, target_evals=evals)

    trials = [reached("base", 10.0 + i, i) for i in range(3)] + [reached("fast", 5.0 + i, i) for i in range(3)]
    trials += [reached("never", None, i) for i in range(3)]
    trials += [reached("some", 9.0, 0), reached("some", None, 1), reached("some", 9.5, 2)]
    names = [Variant("base"), Variant("fast", {"x": 1}), Variant("never", {"x": 2}), Variant("some", {"x": 3})]
    report = summarize(trials, names, "base")
    fast, never = report.variant("fast").time_to_target_ratio, report.variant("never").time_to_target_ratio
    paired = math.exp(sum(math.log((5 + i) / (10 + i)) for i in range(3)) / 3)  # round by round, as throughput
    assert fast.verdict == Verdict.HELPED and fast.median == pytest.approx(paired)
    assert never.verdict == Verdict.HURT and never.median is None  # counted, not timed
    some = report.variant("some").time_to_target_ratio
    assert some.verdict is None and some.ci95 is None and some.median == pytest.approx(9.5 / 11)  # no interval


def test_the_evaluations_grain_is_measured_once_and_said_by_the_final_check_and_the_bench():
    target = Target("val_loss", 1.7)

    def curve(name: str, trial: int, walls: list[float], values: list[float]) -> Trial:
        evals = [{"step": 100 * i, "wall_s": w, "value": v} for i, (w, v) in enumerate(zip(walls, values))]
        seconds = time_to(target, evals)
        return Trial(variant=name, trial=trial, samples_per_s=1.0, time_to_target_s=seconds, target_evals=evals)

    given = [curve("given", i, [3.0, 5.0, 7.0, 9.0, 11.0], [5.0, 2.5, 2.0, 1.8, 1.69]) for i in range(3)]
    tuned = [curve("tuned", i, [3.0, 5.0, 7.0], [5.0, 2.0, 1.6]) for i in range(3)]
    report = summarize(given + tuned, [Variant("given"), Variant("tuned", {"x": 1})], "given")
    assert report.grain == pytest.approx(2.0 / 11.0)  # every gap 2 s, the given's time 11 s
    (said,) = [line for line in verdict_lines(report) if "evaluations" in line]
    assert "18% of the baseline's time to it apart" in said
    first = [curve("given", 0, [3.0], [1.0])]  # met at its first evaluation: no gap to read
    assert summarize(first, [Variant("given")], "given").grain is None
    result = TuneResult(target=str(target), final=FinalCheck(**FINAL, grain=report.grain))
    (said,) = [line for line in final_lines(result, "script") if "evaluations" in line]
    assert "18% of the script as given's time to it apart" in said
    fine = TuneResult(target=str(target), final=FinalCheck(**FINAL, grain=0.01))
    assert not any("evaluations" in line for line in final_lines(fine, "script"))


FINAL = {
    "samples_per_s": Interval(median=1.0),
    "ratio": Interval(median=1.0),
    "verdict": None,
    "median_step_ratio": Interval(median=1.0),
    "median_step_verdict": None,
}


@pytest.mark.slow
def test_tune_for_time_for_real(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.py").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    recipe = {**TINY_LM, "optim": {"name": "adamw", "lr": 3e-3}, "data": {**TINY_LM["data"], "batch_size": 4}}
    recipe["data"]["dataset"] = {**recipe["data"]["dataset"], "root": str(corpus)}
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(recipe))
    work, out = tmp_path / "work", tmp_path / "tuned.yaml"
    # the learning knobs alone (the speed-ups' stages are the simulated tests' and the GPT loop's, test_script_tune)
    argv = [
        "tune",
        str(path),
        "--objective",
        "time",
        "--steps",
        "5",
        "--trials",
        "1",
        "--batch-sizes=",
        "--no-speedups",
    ]
    assert main([*argv, "--work", str(work), "--out", str(out)]) == 0
    data = json.loads((work / "tune.json").read_text())
    page = (work / "tune.html").read_text()  # beside it: the knobs' importance and every trial's history
    assert f"<td>{OPTIMIZER_KEY}</td>" in page and page.count("data:image/png;base64,") == 2
    assert data["target"].startswith("val_loss<=")
    trials = {p.parent.parent.name: json.loads(p.read_text()) for p in work.rglob("trials/*.json")}
    assert set(trials) >= {f"0-{OPTIMIZER_KEY}", "range-test"}
    range_test = trials["range-test"]
    assert len(range_test["step_losses"]) == 6 and "target_evals" not in range_test
    curve = trials[f"0-{OPTIMIZER_KEY}"]
    timed = curve["steps"] + (curve.get("warmup_cut") or 0)  # a leading one-off under load counts as warm-up
    assert curve["target_evals"] and timed == 5  # 6 steps of 4 samples, one of them warm-up
    assert "Objective: the wall time from process start to val_loss<=" in out.read_text()
    assert "time to val_loss<=" in capsys.readouterr().out.replace("│", " ")


def test_tune_for_time_refuses_speed_options(tiny, write_recipe, capsys):
    assert main(["tune", str(write_recipe(tiny)), "--objective", "time", "--workers", "0,1"]) == 2
    assert "belong to --objective speed" in capsys.readouterr().err
    assert main(["tune", str(write_recipe(tiny)), "--target", "val_loss=1"]) == 2
    assert "--target and --no-prune need --objective time" in capsys.readouterr().err
    assert main(["tune", str(write_recipe(tiny)), "--no-prune"]) == 2
    assert "--target and --no-prune need --objective time" in capsys.readouterr().err


# --- every lever: the speed-ups by samples/s, together to the target, then the learning knobs on top ---------------

FUSED, BF16, COMPILE = {"impl": "fused", "enabled": True}, {"dtype": "bf16", "enabled": True}, {"enabled": True}
SPEED_KNOBS = [  # as speedup_knobs makes them, written out so that the test reads the same on every CPU
    Knob("speedups.amp", [{"enabled": False}, BF16], speedup=True, labels=["off", "dtype=bf16"]),
    Knob("speedups.optim", [{"enabled": False}, FUSED], speedup=True, labels=["off", "impl=fused"]),
    Knob("speedups.compile", [{"enabled": False}, COMPILE], speedup=True, labels=["off", "on"]),
]


def simulated_levers(seen: list, final_slower: bool = False):
    """A run_trials stand-in with speed-ups: the fused optimizer 1.5x the samples/s, bf16 2x but its training loss
    moves (it changes results), compile 1.2x on top with 3 s of start-up. Throughput trials (no `samples`: the
    speed-up stages) report samples/s, step times, their first step and the training loss; runs to the target
    are `simulated_learning`'s, their steps as fast as the speed-ups make them, after the start-up."""

    def run_trials(jobs, out, settings, console=None, skip=None):
        results = []
        for trial, name, path in jobs:
            if skip is not None and skip(name, results):
                continue
            recipe = yaml.safe_load(path.read_text())
            on = {k for k, v in recipe["speedups"].items() if v.get("enabled", True)}
            optim, batch = recipe["optim"], recipe["data"]["batch_size"]
            seen.append((out.name, name, tuple(sorted(on)), settings.samples is None))
            speed = (1.5 if "optim" in on else 1.0) * (2.0 if "amp" in on else 1.0) * (1.2 if "compile" in on else 1)
            start = 2.0 + (3.0 if "compile" in on else 0.0)
            sps = 100 * speed * (1 + 0.01 * trial)
            if settings.samples is None:  # a speed-up stage's throughput trial
                results.append(
                    Trial(
                        variant=name,
                        trial=trial,
                        samples_per_s=sps,
                        median_step_samples_per_s=sps,
                        step_times_s=[batch / sps] * settings.steps,
                        first_step_s=start,
                        final_loss=(2.5 if "amp" in on else 2.0) + 0.001 * trial,
                        wall_s=start + settings.steps * batch / sps,
                        env={"device": "cpu (simulated)", "torch": "2.x"},
                    )
                )
                continue
            slow = 3.0 if final_slower and out.name == "final" and name == "tuned" else 1.0
            drop = learning(optim["name"], optim["lr"], batch) * (1 + 0.01 * trial)
            results.append(_to_target(name, trial, settings, drop, batch, sps / slow, start=start))
        return results

    return run_trials


def tune_levers(lm_base, tmp_path, seen: list, final_slower: bool = False):
    base = validate_recipe({**lm_base, "train": {**lm_base["train"], "max_steps": 1000}})
    speed = TrialSettings(steps=10, warmup=3, evaluate=False)
    knobs = [*SPEED_KNOBS, Knob(LR_KEY, [BEST_LR])]
    result = tune(
        base,
        knobs,
        tmp_path,
        time_settings(base),
        trials=3,
        final_check=True,
        run_trials=simulated_levers(seen, final_slower),
        objective=Objective("time", speed=speed),
    )
    return base, result


def test_time_objective_keeps_the_speedups_that_help_without_changing_results_then_tunes_learning(lm_base, tmp_path):
    seen: list = []
    base, result = tune_levers(lm_base, tmp_path, seen)
    # the speed-up stages ran short throughput trials (no samples, no target), each against off
    speed_stages = {where for where, _, _, by_speed in seen if by_speed}
    assert speed_stages == {"0-speedups.amp", "1-speedups.optim", "2-speedups.compile"}
    notes = {(r.knob, r.label): r.note for r in result.rows}
    assert notes[("speedups.amp", "dtype=bf16")].startswith("faster, but its training loss moved beyond noise")
    assert notes[("speedups.optim", "impl=fused")] == "chosen" and notes[("speedups.compile", "on")] == "chosen"
    # then the chosen ones together to the target, against the recipe as given (whose curves set the target), and
    # without compile, whose 3 s start-up the compressed run does not repay: that one is kept
    together = {r.label: r for r in result.rows if r.knob == "speed-ups"}
    assert set(together) == {
        "as given",
        "speedups.optim=impl=fused, speedups.compile=on",
        "speedups.optim=impl=fused",
    }
    assert together["as given"].note == "reference (as given)" and together["as given"].time_to_target_s > 0
    kept = together["speedups.optim=impl=fused"]
    assert kept.note == "chosen" and kept.time_ratio.median < 1 and kept.target_reached == 3
    assert result.target == f"val_loss<={3.0 - learning('adamw', 0.001, 32) * 60 * 32:g}"
    assert result.chosen["speedups.optim"] == FUSED and "speedups.compile" not in result.chosen
    # the learning rate was searched on top of the fused optimizer, to the same target
    lr_trials = [s for s in seen if s[0] == f"3-{LR_KEY}"]
    assert lr_trials and all(s[2] == ("optim",) and not s[3] for s in lr_trials)
    assert result.chosen[LR_KEY] == BEST_LR
    # what each lever bought, and all together in the final check
    shares = dict(levers.shares(result))
    speedups, lr, together = shares[f"speed-ups ({kept.label})"], shares[f"{LR_KEY}={BEST_LR}"], shares["together"]
    assert speedups.median == pytest.approx(kept.time_ratio.median) and lr.median < 1
    assert together.median < min(speedups.median, lr.median) and not result.final.slower
    line = levers.shares_line(result)
    assert f"speed-ups ({kept.label}) {speedups.text()}, {LR_KEY}={BEST_LR} {lr.text()}" in line
    assert f"together {together.text()}" in line
    assert json.loads((tmp_path / "tune.json").read_text())["shares"]["together"]["median"] == together.median

    console = Console(file=io.StringIO(), width=300)
    console.print(table(result))
    rendered = " ".join(console.file.getvalue().replace("│", "|").split())
    assert "| speedups.optim | impl=fused | | | 1.50x" in rendered and "What bought the time" in rendered
    settings = time_settings(base)
    text = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune lm.yaml --objective time", settings, 3)
    fragment = text.read_text()
    assert yaml.safe_load(fragment) == {"speedups": {"optim": FUSED}, "optim": {"lr": BEST_LR}}
    assert "speedups.optim: impl=fused (1.50x" in fragment and "Speed-ups first, each by samples/s" in fragment
    assert "What bought the time to the target: speed-ups (" in fragment


def test_time_objective_never_writes_a_configuration_slower_than_the_one_given(lm_base, tmp_path):
    base, result = tune_levers(lm_base, tmp_path, [], final_slower=True)
    assert result.final.slower and result.chosen == {}
    assert result.final.reverted["speedups.optim"] == FUSED and levers.shares(result) == []
    text = write_fragment(result, tmp_path / "tuned.yaml", base, "accel tune", time_settings(base), 3)
    assert yaml.safe_load(text.read_text()) == {} and "Slower than the recipe as given" in text.read_text()


def test_the_speedup_stages_leave_two_thirds_of_the_budget_to_the_runs_to_the_target(lm_base, tmp_path):
    seen: list = []
    base = validate_recipe({**lm_base, "train": {**lm_base["train"], "max_steps": 1000}})
    result = tune(
        base,
        [*SPEED_KNOBS, Knob(LR_KEY, [BEST_LR])],
        tmp_path,
        time_settings(base),
        trials=3,
        budget_s=240,
        final_check=True,
        run_trials=simulated_levers(seen),
        objective=Objective("time", speed=TrialSettings(steps=10, warmup=3, evaluate=False)),
    )
    notes = {(r.knob, r.label): r.note for r in result.rows}
    # amp's and the optimizer's stages fit in a third of the budget (80 s of simulated trials); compile's did not,
    # though it would have beside the whole budget's
    assert {s[0] for s in seen if s[3]} == {"0-speedups.amp", "1-speedups.optim"}
    assert notes[("speedups.compile", "on")] == "not measured: over the --budget"
    # the rest went to the runs to the target: the speed-ups chosen against the recipe as given, whose curve set it
    assert any(s[0] == "speed-ups" for s in seen) and result.target.startswith("val_loss<=")
    # there the budget cut the stage after the recipe as given: a stage cut short is not trusted, nothing is kept
    assert notes[("speed-ups", "as given")] == "reference (as given); stage ended early: over the --budget"
    assert notes[("speed-ups", "speedups.optim=impl=fused")] == "not run; stage ended early: over the --budget"
    assert "speedups.optim" not in result.chosen


def test_a_time_search_that_ran_no_run_to_the_target_still_reads_as_one(lm_base, tmp_path):
    base = validate_recipe(lm_base)
    result = tune(
        base,
        SPEED_KNOBS[:1],  # bf16 alone: faster, but it changes results, so nothing is run to the target
        tmp_path,
        time_settings(base),
        trials=3,
        final_check=True,
        run_trials=simulated_levers([]),
        objective=Objective("time", speed=TrialSettings(steps=10, warmup=3, evaluate=False)),
    )
    assert result.target is None and result.final is None and not levers.shares(result)
    console = Console(file=io.StringIO(), width=300)
    console.print(table(result))
    rendered = " ".join(console.file.getvalue().split())
    assert "time to the target (none run)" in rendered and "samples/s ratio" in rendered


def _to_target(name, trial, settings, drop, batch, samples_per_s, start: float, eval_s: float = 0.0) -> Trial:
    """A simulated run to the target at `samples_per_s` after `start` seconds: the loss falls by `drop` a sample,
    read at ten evaluations of `eval_s` seconds each; it stops at the target when the trial
    asks to, or short of it where the pruner says so (its `deadline_s`)."""
    steps, step_s, evals, stop = settings.samples // batch, batch / samples_per_s, [], None
    for k in range(1, 11):
        step = steps * k // 10
        value = 3.0 - drop * step * batch
        evals.append({"step": step, "wall_s": start + step * step_s + k * eval_s, "value": value})
        if settings.stop_at_target and value <= float(settings.target.partition("=")[2]):
            break
        if settings.target and (stop := pruned(parse_target(settings.target), evals, settings.deadline_s)):
            break
    env = {"device": "cpu (simulated)", "torch": "2.x"}
    return Trial(
        variant=name,
        trial=trial,
        samples_per_s=samples_per_s,
        wall_s=evals[-1]["wall_s"],
        val_metric_name="val_loss",
        target_evals=evals,
        env=env,
        time_to_target_s=time_to(parse_target(settings.target), evals) if settings.target else None,
        **(stop.record() if stop else {}),
    )
