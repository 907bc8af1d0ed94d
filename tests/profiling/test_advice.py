"""Each advice rule: its finding fires on the figures that show it and not on a quiet profile, and names the fix
and the bench command that proves it."""

from __future__ import annotations

import copy
import json
import shlex

import pytest
import torch

from accel.bench.variants import format_value, vary_variants
from accel.config.recipe import validate_recipe
from accel.config.recipe_yaml import Origins, apply_overrides
from accel.profile.advice import RULES, advise
from accel.speedups import from_configs
from accel.speedups.conflicts import refusals
from accel.strategy import Strategy


def quiet() -> dict:
    """A profile with nothing to say: a balanced CPU step, amp already on, memory to spare."""
    phases = {"data": 0.05, "loss": 0.3, "forward": 0.1, "backward": 0.4, "optimizer": 0.1, "other": 0.05}
    return {
        "device": "cpu",
        "anatomy": {"phases": [{"phase": p, "share": s, "peak_mb": 100.0} for p, s in phases.items()]},
        "gpu": None,
        "matmul_share": 0.6,
        "facts": {
            "precision": "bf16",
            "bf16_fast": True,
            "task": "classification",
            "speedups": ["amp"],
            "num_workers": 2,
            "device_memory_mb": 1000.0,
        },
    }


def _share(report: dict, phase: str, share: float) -> None:
    next(row for row in report["anatomy"]["phases"] if row["phase"] == phase)["share"] = share


def _cuda(report: dict, **gpu) -> None:
    report["device"] = "cuda:0"
    report["gpu"] = {"idle_fraction": 0.05, "kernels_per_step": 100, "median_kernel_us": 200.0, **gpu}


def data_bound(r):
    _share(r, "data", 0.6)


def host_bound(r):
    _cuda(r, idle_fraction=0.55)


def small_kernels(r):
    _cuda(r, kernels_per_step=4000, median_kernel_us=6.0)


def fp32_matmuls(r):
    r["facts"]["precision"] = "fp32"


def memory_bound(r):
    r["anatomy"]["phases"][3]["peak_mb"] = 950.0


def slow_optimizer(r):
    _share(r, "optimizer", 0.3)


CASES = {
    "data-bound": (data_bound, "num_workers", "--vary data.loader.num_workers=0,2,4"),
    "host-bound": (host_bound, "speedups.cuda_graphs", "--vary speedups.compile.enabled=false,true"),
    "small-kernels": (small_kernels, "speedups.compile", "--vary speedups.compile.enabled=false,true"),
    "fp32-matmuls": (fp32_matmuls, "speedups.amp: {dtype: bf16}", "--vary speedups.amp.enabled=false,true"),
    "memory-bound": (memory_bound, "task.fused_loss", "speedups.activation_checkpointing.enabled=false,true"),
    "slow-optimizer": (slow_optimizer, "speedups.compiled_optimizer", "--vary speedups.optim.impl=auto,fused"),
}


def test_every_rule_has_a_case():
    assert {rule.name for rule in RULES} == CASES.keys()


def test_a_quiet_profile_has_no_finding():
    assert advise(quiet(), "r.yaml") == []


@pytest.mark.parametrize("name", CASES)
def test_each_rule_fires_alone_on_its_finding_with_the_fix_and_the_command(name):
    make, fix, bench = CASES[name]
    report = copy.deepcopy(quiet())
    make(report)
    (advice,) = advise(report, "my recipe.yaml")
    assert advice["rule"] == name and fix in advice["fix"]
    assert advice["bench"].startswith("accel bench 'my recipe.yaml' ") and bench in advice["bench"]
    assert advice["finding"] and "{" not in advice["finding"]
    (with_sets,) = advise(report, "r.yaml", ["data.dataset.root=/my data", "data.batch_size=32"])
    assert with_sets["bench"].startswith(
        "accel bench r.yaml '--set=data.dataset.root=/my data' --set=data.batch_size=32 "
    )


def test_fp32_matmuls_are_not_flagged_where_bf16_is_slow_or_matmuls_are_few():
    for change in ({"bf16_fast": False}, {}):
        report = quiet()
        report["facts"].update(precision="fp32", **change)
        report["matmul_share"] = 0.6 if change else 0.1
        assert advise(report, "r.yaml") == []


def test_every_variant_of_every_bench_command_is_one_accel_runs(tiny):
    """The commands vary keys as a product: no combination may be one the conflict rule refuses (issue 39: the
    slow-optimizer command crossed `optim.impl=foreach` with the compiled optimizer, and host-bound's `compile`
    with `cuda_graphs`: pairs the conflict rule refuses)."""
    for rule in RULES:
        varied = shlex.split(rule.bench.format(recipe="r.yaml"))
        items = [varied[i + 1] for i, word in enumerate(varied) if word == "--vary"]
        for variant in vary_variants(items):
            sets = [f"{key}={format_value(value)}" for key, value in variant.overrides.items()]
            recipe = validate_recipe(apply_overrides(tiny, Origins(), sets))
            problems = refusals(from_configs(recipe.speedups), torch.device("cpu"), Strategy())
            assert not problems, (rule.name, variant.name, problems)


def test_mixed_precision_is_not_advised_where_bf16_measured_no_faster_at_the_models_size():
    report = quiet()
    report["facts"].update(precision="fp32", bf16_matmul_speedup=0.7)  # a narrow model: conversions cost more
    assert advise(report, "r.yaml") == []
    report["facts"]["bf16_matmul_speedup"] = 2.0
    (advice,) = advise(report, "r.yaml")  # matmuls 60% of op time, twice as fast: 1/(0.4 + 0.3) for the step
    said = "bf16 matmuls at the model's size measured 2.0x fp32 here; if only they sped up, the step would be 1.43x"
    assert said in advice["finding"] and "an estimate" in advice["finding"]
    report["facts"]["bf16_matmul_speedup"], report["matmul_share"] = 1.8, 0.15  # fast matmuls, but few of them
    assert advise(report, "r.yaml") == []  # 1.07x


def test_a_bench_beside_the_profile_that_measured_bf16_withdraws_an_estimate_its_interval_leaves_out(tmp_path):
    recipe, runs = tmp_path / "r.yaml", tmp_path / "runs"
    recipe.write_text("name: r\n")
    variant = {"overrides": {"speedups.amp.enabled": True}, "verdict": "helped"}
    report = quiet()
    report["facts"].update(precision="fp32", bf16_matmul_speedup=1.7)  # the step estimated 1/(0.4 + 0.6/1.7) = 1.33x

    def finding(median: float, ci95: list[float]) -> str:
        bench = runs / "bench-r" / "report.json"
        bench.parent.mkdir(parents=True, exist_ok=True)
        ratio = {"ratio_vs_baseline": {"median": median, "ci95": ci95}}
        bench.write_text(json.dumps({"recipe": str(recipe), "variants": [variant | ratio]}))
        (advice,) = advise(report, str(recipe), folder=runs / "profile-r")
        return advice["finding"]

    refuted = finding(2.38, [2.25, 2.50])
    assert "estimate of 1.33x from its matmuls alone is withdrawn" in refuted
    assert "measured the step at 2.38x [2.25, 2.50] (helped)" in refuted and "would be" not in refuted
    variant["busy"] = 0.45  # a busy bench's interval decides nothing, as the bench itself says
    busy = finding(2.38, [2.25, 2.50])
    assert "withdrawn" not in busy and "measured the step at 2.38x [2.25, 2.50] (helped, busy machine)" in busy
    del variant["busy"]
    agreed = finding(1.30, [1.20, 1.40])
    assert "would be 1.33x faster" in agreed and "measured the step at 1.30x [1.20, 1.40]" in agreed
    assert "withdrawn" not in agreed


def test_the_bf16_probe_measures_the_models_own_matmul_size():
    from accel.measure.peaks import bf16_matmul_speedup

    ratio = bf16_matmul_speedup(16, 16, torch.device("cpu"), rows=64, seconds=0.01)
    assert 0 < ratio < float("inf")  # a figure, whatever this machine's bf16 (its size is the point, not its speed)


def test_advice_a_bench_beside_it_already_refuted_says_what_the_bench_measured(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\n")
    runs = tmp_path / "runs"
    bench = runs / "bench-r-1" / "report.json"
    bench.parent.mkdir(parents=True)
    variant = {"name": "+amp", "overrides": {"speedups.amp.enabled": True}, "verdict": "hurt"}
    variant["ratio_vs_baseline"] = {"median": 0.66, "ci95": [0.58, 0.76]}
    bench.write_text(json.dumps({"recipe": str(recipe), "variants": [variant]}))
    report = quiet()
    report["facts"]["precision"] = "fp32"
    (advice,) = advise(report, str(recipe), folder=runs / "profile-r-2")
    assert advice["measured"].startswith("a bench of this run measured it at 0.66x [0.58, 0.76] (hurt) in ")
    variant["verdict"] = "helped"
    bench.write_text(json.dumps({"recipe": str(recipe), "variants": [variant]}))
    (advice,) = advise(report, str(recipe), folder=runs / "profile-r-2")
    assert "measured" not in advice  # a bench that agrees leaves the advice as it is
    bench.write_text(json.dumps({"recipe": "other.yaml", "variants": [variant | {"verdict": "hurt"}]}))
    assert "measured" not in advise(report, str(recipe), folder=runs / "profile-r-2")[0]  # another run's bench
