import json
import math

import pytest

from accel.bench.records import Trial, Verdict
from accel.bench.report import table, verdict_lines, write_reports
from accel.bench.summary import summarize
from accel.bench.variants import Variant, ablation_variants, vary_variants

TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nRuntimeError: compile exploded\n'
VARIANT_KEYS = {
    "name",
    "overrides",
    "samples_per_s",
    "ratio_vs_baseline",
    "verdict",
    "first_step_s",
    "final_loss",
    "trials",
    "step_time_p50_s",
    "step_time_p90_s",
    "data_wait_fraction",
    "peak_memory_mb",
    "break_even_steps",
    "val_accuracy",
    "result_changed",
    "errors",
    "ok_trials",
    "warmup_s",
    "tokens_per_s",
    "val_metric",
    "val_metric_name",
    "flop_per_s",
    "mfu",
    "mfu_of",
    "time_to_target_s",
    "target_reached",
    "time_to_target_ratio",
    "lint",
    "compile_s",
    "build_s",
    "eval_s",
    "save_s",
    "median_step_ratio",
    "median_step_verdict",
}


def trial(variant, i, sps, *, first=1.0, loss=0.5, wait=0.1, bs=32):
    step = bs / sps
    return Trial(
        variant=variant,
        trial=i,
        error=None,
        samples_per_s=sps,
        step_times_s=[step * f for f in (0.98, 1.0, 1.0, 1.1)],
        data_wait_fraction=wait,
        peak_memory_mb=500.0 + i,
        first_step_s=first,
        warmup_s=2 * first,
        final_loss=loss,
        val_accuracy=0.9,
        val_metric_name="val_accuracy",
        val_metric=0.9,
        wall_s=10.0,
        batch_size=bs,
    )


def crashed(variant, i):
    return Trial(variant=variant, trial=i, error=TRACE)


# samples/s of 3 trials: amp makes everything 2.5x, cudnn does nothing, compile crashes every time.
SPEED = {"baseline": 100, "all": 250, "+amp": 250, "+cudnn": 100, "-amp": 100, "-cudnn": 250, "-compile": 250}


@pytest.fixture
def ablation():
    variants = ablation_variants({"amp": {"dtype": "bf16"}, "cudnn": {}, "compile": {}})
    trials = []
    for i, jitter in enumerate((-1.0, 0.0, 1.5)):
        for v in variants:
            if v.name == "+compile":
                trials.append(crashed(v.name, i))
            else:
                trials.append(trial(v.name, i, SPEED[v.name] + jitter * SPEED[v.name] / 100))
    return variants, trials


def test_summary_schema_and_verdicts(ablation):
    variants, trials = ablation
    rep = summarize(trials, variants, "baseline", env={"torch": "2.14"}, extra={"command": "accel bench r.yaml"})
    assert rep.baseline == "baseline" and rep.env == {"torch": "2.14"} and rep.command == "accel bench r.yaml"
    rows = rep.by_name
    assert list(rows) == [v.name for v in variants]
    for r in rows.values():
        assert set(r.to_data()) == VARIANT_KEYS  # every key written, even when its value is null
        assert len(r.trials) == 3
    assert rows["+amp"].verdict == Verdict.HELPED and rows["+amp"].ratio_vs_baseline.ci95[0] > 1.0
    assert rows["+cudnn"].verdict == Verdict.NO_EFFECT
    assert rows["baseline"].verdict is None and rows["baseline"].ratio_vs_baseline.median == 1.0
    assert rows["+amp"].samples_per_s.median == pytest.approx(250.0)
    assert rows["+amp"].step_time_p90_s > rows["+amp"].step_time_p50_s
    assert rows["+amp"].peak_memory_mb == 502.0
    assert rows["+amp"].break_even_steps == 0.0  # faster, no extra start-up
    assert rows["+cudnn"].break_even_steps is None  # not measurably faster: no break-even to speak of
    assert rep.speedups["amp"].verdict == Verdict.HELPED
    assert rep.speedups["amp"].removed.verdict == Verdict.HELPED  # all vs -amp
    assert rep.speedups["cudnn"].verdict == Verdict.NO_EFFECT
    assert rep.recommended.overrides == {
        "speedups.amp.enabled": True,
        "speedups.cudnn.enabled": False,
        "speedups.compile.enabled": False,
    }


def test_crashed_variant_is_recorded_with_nulls(ablation):
    variants, trials = ablation
    row = summarize(trials, variants, "baseline").variant("+compile")
    assert row.errors == 3 and row.ok_trials == 0
    assert row.samples_per_s.to_data() == {"median": None, "ci95": None}
    assert row.ratio_vs_baseline.median is None and row.verdict is None
    assert row.first_step_s is None and row.final_loss is None and row.break_even_steps is None
    assert all(t.error == TRACE for t in row.trials)


def test_trial_without_usable_throughput_counts_as_failed():
    base = Variant("baseline")
    trials = [
        trial("baseline", 0, 100.0),
        trial("baseline", 1, math.nan),
        trial("baseline", 2, 100.0).updated(samples_per_s=None),
    ]
    row = summarize(trials, [base], "baseline").variants[0]
    assert (row.ok_trials, row.errors) == (1, 2)
    assert row.samples_per_s.median == 100.0


def test_reports_are_written_with_table_verdicts_and_plots(ablation, tmp_path):
    variants, trials = ablation
    rep = summarize(trials, variants, "baseline", env={"torch": "2.14"}, extra={"command": "accel bench r.yaml"})
    paths = write_reports(rep, tmp_path / "out")
    assert set(paths) == {"json", "md", "html"}
    loaded = json.loads(paths["json"].read_text())
    assert set(loaded) >= {"baseline", "variants", "env", "command", "speedups", "recommended"}
    assert loaded["variants"][2]["trials"][0]["samples_per_s"] == trials[2].samples_per_s
    md = paths["md"].read_text()
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert table[0].startswith("| variant | samples/s [95% CI] | ratio [95% CI] | median-step ratio | verdict vs")
    ranked = [ln.split("|")[1].strip() for ln in table[1:]]
    assert ranked[-1] == "+compile" and set(ranked[:4]) == {"all", "+amp", "-cudnn", "-compile"}
    assert "- amp: helped. Added to baseline: helped, 2.50x [" in md
    assert "- cudnn: no measurable effect." in md
    assert "- compile: no measurable effect. Added to baseline: no successful trials; removed from all" in md
    assert "no measurable effect, 1.00x [1.00, 1.00]. 3 of its trials failed." in md
    assert "Command: `accel bench r.yaml`" in md
    assert "## Recommended configuration\n\namp; left out because trials failed: compile\n" in md
    assert "- +compile trial 0: RuntimeError: compile exploded" in md
    html = paths["html"].read_text()
    for png in ("throughput.png", "step_times.png", "data_wait.png"):
        assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.count('<img src="data:image/png;base64,') == 3  # the three plots, inside the page
    assert "RuntimeError: compile exploded" in html and "<table>" in html


def test_speedup_that_helped_but_crashed_once_is_not_recommended():
    variants = ablation_variants({"amp": {}})
    trials = [trial("baseline", i, 100.0 + i) for i in range(3)] + [trial("+amp", i, 250.0 + i) for i in range(3)]
    rep = summarize(trials + [crashed("+amp", 3)], variants, "baseline")
    assert rep.speedups["amp"].verdict == Verdict.HELPED
    assert rep.recommended.overrides == {"speedups.amp.enabled": False}
    assert "left out because trials failed: amp" in rep.recommended.text


@pytest.mark.slow
def test_everything_failed_still_writes_reports(tmp_path):
    variants = ablation_variants({"amp": {}})
    rep = summarize([crashed(v.name, 0) for v in variants], variants, "baseline")
    assert all(r.samples_per_s.median is None and r.verdict is None for r in rep.variants)
    assert rep.speedups["amp"].verdict is None
    assert rep.recommended.overrides == {}  # not even the baseline: it failed too
    assert rep.recommended.text.startswith("none: every variant's trials failed")
    ok = summarize([trial(v.name, 0, 100.0) for v in variants], variants, "baseline")
    page = write_reports(ok, tmp_path)["html"].read_text()
    assert (tmp_path / "throughput.png").exists()
    assert '<img src="data:image/png;base64,' in page and 'src="throughput.png"' not in page  # sent alone, whole
    unmeasured = [trial(v.name, 0, 100.0).model_copy(update={"data_wait_fraction": None}) for v in variants]
    page = write_reports(summarize(unmeasured, variants, "baseline"), tmp_path)["html"].read_text()
    assert "No data wait to plot: the trials' batches came from no loader accel measures" in page
    paths = write_reports(rep, tmp_path)  # same folder: the earlier plots must not survive as stale
    assert "No successful trials to plot" in paths["html"].read_text()
    assert not (tmp_path / "throughput.png").exists()
    assert "Failed trials" in paths["md"].read_text()


def test_result_change_break_even_and_nan_are_reported(tmp_path):
    base, fast = Variant("baseline"), Variant("+compile", {"speedups.compile.enabled": True})
    trials = [trial("baseline", i, 100.0, first=1.0, loss=1.0) for i in range(3)]
    trials += [trial("+compile", i, 200.0, first=11.0, loss=2.0) for i in range(2)]
    trials.append(trial("+compile", 2, 200.0, first=11.0, loss=math.nan))
    rep = summarize(trials, [base, fast], "baseline")
    row = rep.variants[1]
    # 10 s extra start-up; a variant step (0.16 s) would take the baseline 0.32 s: repaid after 62.5 steps.
    assert row.break_even_steps == pytest.approx(10.0 / 0.16)
    assert row.result_changed is True
    assert "results changed" in write_reports(rep, tmp_path)["md"].read_text()
    text = (tmp_path / "report.json").read_text()
    assert "NaN" not in text and json.loads(text)["variants"][1]["trials"][2]["final_loss"] is None


def test_one_trial_a_side_flags_a_divergence_but_not_a_loss_it_cannot_tell_from_noise(tmp_path):
    base, other = Variant("baseline"), Variant("+amp", {"speedups.amp.enabled": True})
    apart = summarize(
        [trial("baseline", 0, 100.0, loss=1.0), trial("+amp", 0, 110.0, loss=1.5)], [base, other], "baseline"
    )
    assert apart.variants[1].result_changed is None  # an unseeded script's single run differs this much by chance
    assert "results changed" not in write_reports(apart, tmp_path)["md"].read_text()
    nan = summarize([trial("baseline", 0, 100.0), trial("+amp", 0, 110.0, loss=math.nan)], [base, other], "baseline")
    assert nan.variants[1].result_changed is True


def test_vary_report_recommends_fastest_helped_combination():
    variants = vary_variants(["data.batch_size=32,64,128"])
    speeds = {32: 100.0, 64: 180.0, 128: 181.0}
    trials = [trial(v.name, i, speeds[v.overrides["data.batch_size"]] + i) for i in range(3) for v in variants]
    rep = summarize(trials, variants, variants[0].name)
    assert rep.speedups == {}
    assert rep.recommended.overrides == {"data.batch_size": 128}
    assert rep.recommended.text.startswith("data.batch_size=128 (1.8")


def test_bad_inputs_are_rejected(ablation):
    variants, trials = ablation
    with pytest.raises(ValueError, match="baseline `nope`"):
        summarize(trials, variants, "nope")
    with pytest.raises(ValueError, match="unknown variant `ghost`"):
        summarize(trials + [crashed("ghost", 0)], variants, "baseline")
    with pytest.raises(ValueError, match="overwrite"):
        summarize(trials, variants, "baseline", extra={"variants": []})


def test_a_failed_variant_is_never_recommended_nor_the_baseline_for_ratios():
    variants = vary_variants(["data.batch_size=5000,64,128"])
    big, small, mid = (v.name for v in variants)
    trials = [crashed(big, i) for i in range(2)]
    trials += [trial(small, i, 100.0 + i) for i in range(2)] + [trial(mid, i, 101.0 + i) for i in range(2)]
    rep = summarize(trials, variants, big)
    assert rep.baseline == small  # ratios against the first variant that ran
    rows = rep.by_name
    assert rows[small].ratio_vs_baseline.median == 1.0 and rows[big].ratio_vs_baseline.median is None
    assert rep.recommended.overrides != {"data.batch_size": 5000}
    assert "5000" not in rep.recommended.text
    everything = summarize([crashed(v.name, 0) for v in variants], variants, big)
    assert everything.recommended.overrides == {}
    assert everything.recommended.text.startswith("none: every variant's trials failed")


def test_speed_lint_findings_are_reported_once_with_their_variants(tmp_path):
    finding = {
        "code": "workers-compete",
        "found": "1 loader worker(s) + 2 compute threads on 2 cores.",
        "fix": "data.loader.num_workers: 0",
    }
    base, more = Variant("baseline"), Variant("workers=1", {"data.loader.num_workers": 1})
    trials = [trial("baseline", i, 100.0) for i in range(2)]
    trials += [trial("workers=1", i, 90.0).updated(lint=[finding]) for i in range(2)]
    rep = summarize(trials, [base, more], "baseline")
    assert rep.variants[1].lint == [finding] and rep.variants[0].lint == []
    md = write_reports(rep, tmp_path)["md"].read_text()
    assert (
        "## Speed lint\n\n- 1 loader worker(s) + 2 compute threads on 2 cores. Fix: data.loader.num_workers: 0 "
        "(workers=1)" in md
    )


def test_a_lint_finding_of_the_baseline_says_what_the_bench_measured_where_it_was_not_found(tmp_path):
    """timm on an AMX Xeon: the lint advised bf16 (its matmuls 3.4x fp32's) in the report where the bench measured
    the script's bf16 0.84x: the report says both, side by side."""
    finding = {"code": "fp32-with-fast-bf16", "found": "training in fp32 on this CPU (AMX).", "fix": "bf16 autocast"}
    base, amp = Variant("baseline"), Variant("amp", {"speedups.amp.enabled": True})
    trials = [trial("baseline", i, 100.0 + i).updated(lint=[finding]) for i in range(3)]
    trials += [trial("amp", i, 80.0 + i) for i in range(3)]
    md = write_reports(summarize(trials, [base, amp], "baseline"), tmp_path)["md"].read_text()
    assert "Fix: bf16 autocast (baseline). Measured here without it: amp hurt, 0.80x [" in md
    assert "vs baseline." in md.split("## Speed lint")[1]


def test_compile_seconds_get_a_column_only_when_a_variant_compiled():
    variants = ablation_variants({"compile": {}})
    plain = [trial("baseline", i, 100.0) for i in range(2)]
    compiled = [trial("+compile", i, 110.0).updated(compile_s=20.0 + i) for i in range(2)]
    rep = summarize(plain + compiled, variants, "baseline")
    rows = rep.by_name
    assert rows["+compile"].compile_s == 20.5 and rows["baseline"].compile_s is None
    header, body = table(rep)
    column = header.index("compile s")
    cells = {row[0]: row[column] for row in body}
    assert (cells["+compile"], cells["baseline"]) == ("20.5", "n/a")
    assert "compile s" not in table(summarize(plain, variants[:1], "baseline"))[0]


def test_each_mfu_says_the_dtype_whose_peak_it_is_of():
    """On an H200 an HF script's fp32 baseline read 51% of the fp32 peak and its --bf16 10% of bf16's: one column,
    two scales, so each cell names its dtype."""
    variants = vary_variants(["speedups.amp.enabled=false,true"])
    fp32 = [trial(variants[0].name, i, 100.0).updated(mfu=0.512, mfu_of="fp32") for i in range(2)]
    bf16 = [trial(variants[1].name, i, 300.0).updated(mfu=0.00006, mfu_of="bf16") for i in range(2)]
    rep = summarize(fp32 + bf16, variants, variants[0].name)
    header, body = table(rep)
    column = header.index(next(h for h in header if h.startswith("MFU")))
    cells = {row[0]: row[column] for row in body}
    assert [cells[v.name] for v in variants] == ["51% fp32", "0.006% bf16"]  # two significant digits, never 0.0%
    assert rep.by_name[variants[1].name].mfu_of == "bf16"


def test_a_stalled_trial_moves_the_mean_but_not_the_median_step():
    """One stalled step in each baseline trial makes a no-op variant look 1.2x faster on average; its median step
    says no effect, and the report says both."""

    def timed(variant, i, mean, steady):
        return trial(variant, i, mean).updated(median_step_samples_per_s=steady)

    trials = [timed("base", i, 100 + i, 120 + i / 10) for i in range(3)] + [
        timed("fast", i, 120 + i, 120 + i / 10) for i in range(3)
    ]
    rep = summarize(trials, [Variant("base"), Variant("fast")], "base")
    fast = rep.variants[1]
    assert fast.verdict == Verdict.HELPED and fast.median_step_verdict == Verdict.NO_EFFECT
    assert fast.median_step_ratio.median == pytest.approx(1.0)
    assert rep.variants[0].median_step_ratio.median == 1.0
    (line,) = verdict_lines(rep)
    assert line.startswith("fast: helped, 1.20x") and "; by median step times no measurable effect, 1.00x" in line
    old = [t.without("median_step_samples_per_s") for t in trials]  # an older report
    fast = summarize(old, [Variant("base"), Variant("fast")], "base").variants[1]
    assert fast.median_step_verdict is None and fast.median_step_ratio.median is None


def _beside_others(t: Trial, share: float) -> Trial:
    load = {"wall_s": 10.0, "cores": 2, "own_cpu_s": 9.0, "others_cpu_s": 20 * share, "steal_s": 0.0}
    return t.updated(load=load | {"others_share": share, "load_avg_1m": 7.5})


def test_a_verdict_measured_on_a_busy_machine_is_withheld_and_said(tmp_path):
    variants = vary_variants(["data.batch_size=32,64,128"])
    speeds = {32: 100.0, 64: 300.0, 128: 181.0}
    trials = [trial(v.name, i, speeds[v.overrides["data.batch_size"]] + i) for i in range(3) for v in variants]
    # one trial of the fastest variant ran while others took 45% of the cores; another's 5% is not busy
    trials = [
        _beside_others(t, 0.45) if (t.variant, t.trial) == ("data.batch_size=64", 1) else _beside_others(t, 0.05)
        for t in trials
    ]
    rep = summarize(trials, variants, variants[0].name)
    fast, quiet = rep.by_name["data.batch_size=64"], rep.by_name["data.batch_size=128"]
    assert fast.verdict is None and fast.median_step_verdict is None and fast.busy == pytest.approx(0.45)
    assert fast.ratio_vs_baseline.median == pytest.approx(3.0, rel=0.02)  # the figures are kept
    assert quiet.verdict == Verdict.HELPED and quiet.busy is None
    assert rep.recommended.overrides == {"data.batch_size": 128}  # not the busy one, though faster
    assert "no verdict for data.batch_size=64: the machine was busy" in rep.recommended.text
    paths = write_reports(rep, tmp_path)
    said = "inconclusive: busy machine (others took 45% of the cores)"
    stored = {v["name"]: v for v in json.loads(paths["json"].read_text())["variants"]}
    assert stored["data.batch_size=64"]["busy"] == 0.45 and stored["data.batch_size=64"]["verdict"] is None
    assert "busy" not in stored["data.batch_size=128"]  # a quiet comparison's record is as before
    md = paths["md"].read_text()
    assert f"| {said} |" in md and f"data.batch_size=64: {said}, 2.9" in md
    assert said in paths["html"].read_text()
    from accel.bench.report import summary_text

    assert f"| {said} |" in summary_text(rep)  # the printed table


def test_a_busy_baseline_withholds_every_verdict_of_an_ablation():
    variants = ablation_variants({"amp": {"dtype": "bf16"}, "cudnn": {}})
    speed = {"baseline": 100, "all": 250, "+amp": 250, "+cudnn": 100, "-amp": 100, "-cudnn": 250}
    trials = [trial(v.name, i, speed[v.name] + i) for i in range(3) for v in variants]
    trials = [_beside_others(t, 0.6) if t.variant == "baseline" and t.trial == 0 else t for t in trials]
    rep = summarize(trials, variants, "baseline")
    assert all(rep.by_name[n].verdict is None for n in ("+amp", "+cudnn", "all", "-amp", "-cudnn"))
    # all vs -amp did not involve the busy baseline: that reading stands, but the speed-up's verdict does not
    assert rep.speedups["amp"].removed.verdict == Verdict.HELPED and rep.speedups["amp"].verdict is None
    assert rep.speedups["amp"].added.busy == pytest.approx(0.6)
    # nothing is recommended from them: not even "off", which would turn off what the run had on
    assert rep.recommended.overrides == {}
    assert rep.recommended.text.startswith("no change; no verdict")
    assert "no verdict for amp, cudnn: the machine was busy" in rep.recommended.text
    assert verdict_lines(rep)[0].startswith("amp: inconclusive: busy machine (others took 60% of the cores).")


def test_trials_at_two_speeds_are_flagged_unsteady_with_the_slowest_and_fastest(tmp_path):
    """As on a GPU host where inductor's compile pool was still starting in two trials of three: the interval
    spans both speeds, and the report says so instead of leaving a bare "undecided"."""
    variants = vary_variants(["speedups.compile.release_workers=false,true"])
    speeds = {False: (42634.0, 21761.0, 22059.0), True: (40481.0, 38137.0, 45665.0)}
    trials = [
        trial(v.name, i, speeds[v.overrides["speedups.compile.release_workers"]][i]) for i in range(3) for v in variants
    ]
    rep = summarize(trials, variants, variants[0].name)
    slow, steady = rep.by_name[variants[0].name], rep.by_name[variants[1].name]
    assert slow.unsteady == (21761.0, 42634.0) and steady.unsteady is None  # 45,665 is under 1.3x 38,137
    assert steady.verdict is None and steady.undecided  # the wide interval decides nothing; the flag explains it
    header, rows = table(rep)
    flags = {row[0]: row[header.index("flag")] for row in rows}
    assert flags == {slow.name: "unsteady: trials 21,761-42,634 samples/s", steady.name: ""}
    assert verdict_lines(rep)[-1].startswith(
        f"Unsteady trials ({slow.name} 21,761-42,634 samples/s, slowest to fastest): each interval spans two speeds"
    )
    stored = {v["name"]: v for v in json.loads(write_reports(rep, tmp_path)["json"].read_text())["variants"]}
    assert stored[slow.name]["unsteady"] == [21761.0, 42634.0] and "unsteady" not in stored[steady.name]


def test_a_refused_variant_is_reported_refused_with_the_reason_and_never_recommended():
    variants = vary_variants(["speedups.jit.enabled=false,true", "data.batch_size=32,64"])
    names = [v.name for v in variants]
    refused = {names[1]: "speed-ups `jit` and `compile` both turn the model into another program"}
    trials = [trial(n, i, sps) for i, sps in enumerate((100.0, 101.0, 99.0)) for n in names if n != names[1]]
    report = summarize(trials, variants, names[0], refused=refused)
    row = report.variant(names[1])
    assert row.refused == refused[names[1]] and row.trials == [] and row.errors == 0
    assert "refused" not in report.variant(names[0]).to_data()  # set only where the rule refused
    assert any(line.startswith(f"{names[1]}: refused, not run: speed-ups `jit`") for line in verdict_lines(report))
    _, rows = table(report)
    refused_row = next(r for r in rows if r[0] == names[1])
    assert refused_row[4] == "refused" and refused_row[-1] == "refused, not run"
    assert names[1] not in report.recommended.text


def test_an_ablation_leaves_a_refused_speedup_out_of_its_recommendation():
    variants = ablation_variants({"amp": {"dtype": "bf16"}, "jit": {}})
    by_name = {v.name: v for v in variants}
    speeds = {"baseline": 100, "+amp": 250, "-amp": 100, "+jit": 100, "-jit": 250}  # "all" refused: not run
    trials = [trial(n, i, speeds[n] + jitter) for i, jitter in enumerate((-1.0, 0.0, 1.5)) for n in speeds]
    report = summarize(trials, list(by_name.values()), "baseline", refused={"all": "amp and jit cannot be stacked"})
    assert report.variant("all").refused and report.speedups["amp"].removed is None
    assert report.recommended.text.split(";")[0] == "amp"  # jit measured no effect
    lines = verdict_lines(report)
    assert (
        lines[0]
        == "all: refused, not run, so each speed-up is read added to baseline only: amp and jit cannot be stacked"
    )
    assert lines[1].startswith("amp: helped. Added to baseline: helped")


def test_speedups_that_helped_apart_but_were_refused_together_are_said_so():
    variants = ablation_variants({"amp": {"dtype": "bf16"}, "jit": {}})
    speeds = {"baseline": 100, "+amp": 250, "-amp": 150, "+jit": 150, "-jit": 250}
    trials = [trial(n, i, speeds[n] + jitter) for i, jitter in enumerate((-1.0, 0.0, 1.5)) for n in speeds]
    report = summarize(trials, variants, "baseline", refused={"all": "amp and jit cannot be stacked"})
    text = report.recommended.text
    assert text.startswith("amp, jit") and "all of them together was refused (amp and jit cannot be stacked)" in text
