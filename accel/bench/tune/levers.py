"""`tune --objective time` with every lever: the speed-ups first, then the learning knobs on top of them.

The fastest run to a target is the fastest step times the fewest steps, and the two are found apart, each by the
rule made for it. The speed-ups (a script's Trainer flags too: `Knob.guard`) are searched as the speed objective
searches them, by short throughput trials (`Objective.speed`) and its rule (`search._pick`: measurably more
samples/s by the mean and the median step, the training loss unchanged beyond noise, the bench's results-changed
rule, and a start-up repaid within the planned run). Those trials evaluate nothing, so one more stage (`by_time`)
runs the chosen speed-ups together against the configuration as given, to the target: there the target is read
from the configuration as given, a start-up cost (a compilation) counts in full, and the speed-ups must reach the
target in every trial, no later on the median than the configuration as given (the final check's rule,
`FinalCheck.slower`). When all together miss that, the same speed-ups without the one slowest to repay its
start-up run beside them. The learning knobs (optimizer, learning rate, batch size with the rate scaled) are then
searched on top of the speed-ups kept, as their time stages always were. `shares` says what each lever bought.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records import Reading, VariantSummary
from ..summary import summarize
from ..variants import Variant, format_value, interleave
from .budget import WithinBudget
from .objective import Objective
from .rows import CUT, FinalCheck, TuneRow, final_check, measured_row, skipped_row

if TYPE_CHECKING:
    from ..knobs import Knob
    from .search import Measure, TuneResult

KEY = "speed-ups"  # the rows of the stage that runs the chosen speed-ups to the target
SPEED = "speed"  # the budget's kind of the speed-up stages' throughput trials
# The speed-up stages may spend this share of the --budget, the runs to the target the rest: on the GPT example a
# run to its target takes 3-4 short trials' time, and the speed-ups' stages hold about as many candidates as the
# learning knobs' and the final check together, but one cold compile costs a minute on a busy 2-core CPU.
SPEED_SHARE = 1 / 3


def speeds(knob: Knob) -> bool:
    """A knob that changes speed only: a speed-up, or a script's speed flag held to a speed-up's rule."""
    return knob.speedup or knob.guard


def speed_measure(m: Measure) -> Measure:
    """How the speed-up stages of the time objective run: the speed objective's trials and rule."""
    return replace(m, settings=m.objective.speed or m.settings, objective=Objective(), kind=SPEED)


def _label(m: Measure, levers: dict[str, Any], rows: list[TuneRow]) -> str:
    """The speed-ups that change the configuration as given, as their rows label them: `speedups.amp=dtype=bf16,
    speedups.compile=on` (a speed-up left off that the configuration lacks says nothing)."""
    said = []
    for key, value in levers.items():
        if m.subject.config_key({key: value}) == m.subject.config_key({}):
            continue
        row = next((r for r in rows if r.knob == key and r.value == value), None)
        said.append(f"{key}={row.label if row else format_value(value)}")
    return ", ".join(said) or "as given"


def _startup(levers: dict[str, Any], rows: list[TuneRow]) -> str | None:
    """The chosen speed-up slowest to repay its start-up in its own stage (a compilation), if any has one."""
    costs = {
        r.knob: r.break_even_steps
        for r in rows
        if r.knob in levers and r.value == levers[r.knob] and (r.break_even_steps or 0) > 0
    }
    return max(costs, key=costs.get) if costs else None


def by_time(m: Measure, result: TuneResult, speed_keys: list[str], out: Path, failed: str | None = None) -> None:
    """Run the speed-ups chosen by samples/s together against the configuration as given, to the target, and
    keep them only when they reach it in every trial no later on the median (else the same without the one
    slowest to repay its start-up, when that one passes); otherwise the speed-ups stay as given. `failed`: why
    the configuration as given could not run the speed-up stages' trials, which leaves the speed-ups as given."""
    subject = m.subject
    if failed is not None:
        last = [line for line in failed.strip().splitlines() if line.strip()] or ["?"]
        note = f"speed-ups not searched: the {subject.given} failed their short throughput trials: {last[-1][:200]}"
        result.rows.append(skipped_row(KEY, {}, f"{KEY}=as given", note))
        for key in speed_keys:
            result.chosen.pop(key, None)
        return
    levers = {k: result.chosen[k] for k in speed_keys if k in result.chosen}
    if subject.config_key(levers) == subject.config_key({}):
        return  # nothing measurably faster, or only the speed-ups as given: nothing to run to the target
    given = Variant(f"{KEY}=as given")
    variants = [given, Variant(f"{KEY}={_label(m, levers, result.rows)}", levers)]
    slow = _startup(levers, result.rows)
    without = {k: v for k, v in levers.items() if k != slow}
    if slow and subject.config_key(without) != subject.config_key({}):
        variants.append(Variant(f"{KEY}={_label(m, without, result.rows)}", without))
    if not m.budget.allows(len(variants) * m.trials):  # never run to the target: the speed-ups stay as given
        said = "not measured: over the --budget, so the speed-ups stay as given"
        result.rows += [skipped_row(KEY, v.overrides, v.name, said) for v in variants[1:]]
        for key in levers:
            result.chosen.pop(key, None)
        return
    files = subject.inputs(variants, out)
    jobs = [(t, v.name, files[v.name]) for t, v in interleave(variants, m.trials)]
    within = WithinBudget(m.budget, [name for _, name, _ in jobs], m.kind)
    done = m.run(jobs, out, skip=within)
    m.budget.record(done, m.kind)
    report = summarize(m.objective.read(done, given.name), variants, given.name)
    checks = {v.name: final_check(report.variant(v.name), report.variant(given.name)) for v in variants[1:]}
    # a stage cut short by the budget is not trusted (as a speed stage's is not): the speed-ups stay as given
    kept = [] if within.cut else [r for n, check in checks.items() if _kept(r := report.variant(n), check)]
    best = min(kept, key=lambda r: r.time_to_target_s, default=None)
    for r in report.variants:
        note = "reference (as given)" if r.name == given.name else "chosen" if best and r.name == best.name else ""
        if r.name in checks and not _kept(r, checks[r.name]):
            note = "not kept: no sooner than as given on the median, or short of the target in a trial"
        if within.cut:
            note = "; ".join(filter(None, [note if r.trials else "not run", CUT]))
        result.rows.append(measured_row(KEY, r, note=note, value=r.overrides))
    result.compared.append(KEY)
    for key in levers:  # as given, unless kept
        if best is None or key not in best.overrides:
            result.chosen.pop(key, None)
    if best is not None:
        result.levers.append((f"{KEY} ({best.name.partition('=')[2]})", best.time_to_target_ratio))


def _kept(r: VariantSummary, check: FinalCheck) -> bool:
    """Every trial ran and reached the target, no later on the median than the configuration as given."""
    return bool(r.ok_trials) and not r.errors and check.reached is not None and not check.slower


def shares(result: TuneResult) -> list[tuple[str, Reading | None]]:
    """What each lever kept bought, as its stage measured it against the choices before it (the speed-ups against
    the configuration as given, each learning knob on top of them), then all together in the final check."""
    if result.final is None or result.final.reverted is not None:
        return []
    return [*result.levers, ("together", result.final.time_ratio)]


def shares_line(result: TuneResult) -> str | None:
    """`What bought the time to the target: speed-ups (...) 0.80x, optim.lr 0.75x (...); together 0.60x (...)`."""
    found = shares(result)
    if len(found) < 2:
        return None
    each = ", ".join(f"{name} {_ratio(r)}" for name, r in found[:-1])
    return (
        f"What bought the time to the target: {each} (each in its own stage, against the choices before it); "
        f"together {_ratio(found[-1][1])} (the final check, against the configuration as given)."
    )


def _ratio(reading: Reading | None) -> str:
    return reading.text("{:.2f}", "x") if reading is not None and reading.median is not None else "n/a"
