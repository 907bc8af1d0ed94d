"""The real run a recommendation is for (accel/bench/real_run.py): its length weighs each faster variant's
start-up, and the report gives the command that runs the recommendation."""

from __future__ import annotations

from accel.bench.real_run import run_with
from accel.bench.records import Recommendation, Trial
from accel.bench.runner import BenchRun
from accel.bench.summary import summarize
from accel.bench.trial_process import TrialSettings
from accel.bench.variants import Variant
from tests.bench.test_report import trial

COMPILED = "speedups.compile.enabled=true"
VARIANTS = [
    Variant("baseline", {"speedups.compile.enabled": False}),
    Variant(COMPILED, {"speedups.compile.enabled": True}),
]


def _trials(jitter: float = 0.01) -> list[Trial]:
    """compile: 2x the samples/s, 60 s more to its first step (its break-even: 60 s / 0.16 s saved a step)."""
    out = []
    for i in range(3):
        out.append(trial("baseline", i, 100 * (1 + jitter * i)))
        out.append(trial(COMPILED, i, 200 * (1 + jitter * i), first=61.0))
    return out


def test_a_speedup_whose_start_up_the_run_cannot_repay_is_not_recommended():
    short = summarize(_trials(), VARIANTS, "baseline", run_steps=100)
    even = short.variant(COMPILED).break_even_steps
    assert 100 < even < 10_000
    assert short.recommended.overrides == {"speedups.compile.enabled": False}
    assert f"repay their start-up only after the run's 100 steps: {COMPILED} (after {even:,.0f})" in (
        short.recommended.text
    )
    long = summarize(_trials(), VARIANTS, "baseline", run_steps=100_000)
    assert long.recommended.overrides == {"speedups.compile.enabled": True}
    unknown = summarize(_trials(), VARIANTS, "baseline")
    assert unknown.recommended.overrides == {"speedups.compile.enabled": True}
    assert f"{COMPILED} from {even:,.0f} steps on: a shorter run is slower with it" in unknown.recommended.text


def test_the_recommendation_comes_with_the_command_that_runs_it():
    on = Recommendation(overrides={"speedups.compile.enabled": True, "data.batch_size": 64}, text="")
    off = Recommendation(overrides={"speedups.compile.enabled": False}, text="")
    recipe = BenchRun(VARIANTS, "baseline", "my recipe.yaml", {}, TrialSettings(3, 1), 2)
    assert run_with(recipe, on, VARIANTS[0]) == (
        "accel train 'my recipe.yaml' --set=speedups.compile.enabled=true --set=data.batch_size=64"
    )
    assert run_with(recipe, off, VARIANTS[0]) is None  # the baseline as it runs
    script = BenchRun(
        VARIANTS, "baseline", "python train.py", {}, TrialSettings(3, 1), 2, script=["python", "train.py"]
    )
    assert run_with(script, on, VARIANTS[0]) == (
        "ACCEL_SET='speedups.compile.enabled=true data.batch_size=64' python train.py"
    )
    flags = Recommendation(overrides={"arg:--bf16": "True", "env:OMP_NUM_THREADS": "2"}, text="")
    unchanged = BenchRun([Variant("baseline")], "baseline", "", {}, TrialSettings(3, 1), 2, script=["python", "t.py"])
    assert run_with(unchanged, flags, Variant("baseline")) == "OMP_NUM_THREADS=2 python t.py --bf16=True"
