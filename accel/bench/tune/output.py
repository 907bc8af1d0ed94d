"""What `accel tune` shows and writes: the table of candidates and the recipe fragment of its choices."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from ...config.recipe import Recipe
from ...errors import AccelError
from ...io import write_atomic
from ...measure.load import busy_note
from ..knobs import BATCH_KEY, lookup
from ..records import Interval
from ..report import grain_line
from ..summary import MIN_TRIALS
from ..trial_process import TrialSettings
from ..variants import format_value
from .levers import shares_line
from .rows import UNJUDGED, TuneRow
from .search import TuneResult

WRITTEN_BY = "# Written by `accel tune"  # how a fragment's first line starts (`_comment`): one tune may replace
NOTHING_MEASURED = (
    "Nothing was measured: no knob's candidates ran beside its reference within the --budget (or "
    "every candidate was skipped), so this fragment changes nothing. Give a larger --budget."
)


def _ratio(interval: Interval | None) -> str:
    return (interval or Interval()).text("{:.2f}", "x")


def table(result: TuneResult) -> Table:
    """The measurements as a rich table, one row per candidate, grouped by knob."""
    if result.target or result.objective == "time":  # the time objective's, even when no run reached a target
        return _time_table(result)
    out = Table(title="accel tune: samples/s per candidate (ratio vs the recipe's value; vs off for speed-ups)")
    for column in ("knob", "value", "samples/s [95% CI]", "ratio [95% CI]", "median-step ratio", "verdict", "note"):
        out.add_column(column)
    for r in result.rows:
        out.add_row(
            r.knob,
            r.label,
            r.samples_per_s.text("{:.1f}", ""),
            _ratio(r.ratio),
            _ratio(r.median_step_ratio),
            r.verdict or "",
            r.note,
        )
    final = result.final
    if final:
        disagree = final.median_step_verdict not in (None, final.verdict)
        out.add_row(
            "final check",
            f"tuned vs {final.given}",
            final.samples_per_s.text("{:.1f}", ""),
            _ratio(final.ratio),
            _ratio(final.median_step_ratio),
            final.verdict or ("no verdict: busy machine" if final.busy is not None else ""),
            f"by median steps: {final.median_step_verdict}" if disagree else "",
        )
    return out


def _reached(time_s: float | None, reached: int | None) -> str:
    return "n/a" if reached is None else f"{time_s:.1f} ({reached} reached)" if reached else "never reached"


def _time_table(result: TuneResult) -> Table:
    out = Table(
        title=f"accel tune: time to {result.target or 'the target (none run)'} per candidate (ratio vs the "
        "reference's; below 1: sooner; speed-ups first by samples/s)",
        caption=shares_line(result),
    )
    columns = ("knob", "value", "time to target s", "time ratio [95% CI]", "samples/s ratio [95% CI]", "verdict")
    for column in (*columns, "samples/s", "note"):
        out.add_column(column)
    for r in result.rows:
        by_speed = _by_speed(r)  # a speed-up stage's row: its trials ran for samples/s, not to the target
        out.add_row(
            r.knob,
            r.label,
            "" if by_speed else _reached(r.time_to_target_s, r.target_reached),
            "" if by_speed else _ratio(r.time_ratio),
            _ratio(r.ratio) if by_speed else "",
            (r.verdict if by_speed else r.time_ratio and r.time_ratio.verdict) or "",
            r.samples_per_s.text("{:.1f}", ""),
            r.note,
        )
    final = result.final
    if final:
        out.add_row(
            "final check",
            f"tuned vs {final.given}",
            ", ".join(f"{k} {v}" for k, v in (final.reached or {}).items()),
            _ratio(final.time_ratio),
            "",
            (final.time_ratio and final.time_ratio.verdict) or "",
            final.samples_per_s.text("{:.1f}", ""),
            "",
        )
    return out


def _by_speed(row: TuneRow) -> bool:
    """A row of a speed-up stage of `--objective time`: measured by samples/s, with no time to the target."""
    return row.target_reached is None and row.time_ratio is None and row.ratio.median is not None


def _nested(chosen: dict[str, Any]) -> dict:
    data: dict = {}
    for key, value in chosen.items():
        node = data
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = value
    return data


def choice_line(result: TuneResult, plain: dict, key: str, value: Any, given: str = "recipe") -> str:
    """Why `key` has `value` (`given`: what had the value before, the recipe or the script)."""
    row = next((r for r in result.rows if r.knob == key and r.value == value), None)
    was = format_value(lookup(plain, key))
    if row is None:  # carried by another knob's choice (a batch size's learning rate)
        return f"{key}: {format_value(value)} ({given} had {was}; set with the batch size)"
    if result.target and not _by_speed(row):
        if lookup(plain, key) == value:
            return _kept(result, key, value, given)
        return f"{key}: {format_value(value)} ({given} had {was}; {_ratio(row.time_ratio)} the time to the target)"
    ratio, label = _ratio(row.ratio), row.label
    if key.startswith("speedups."):
        said = f"{ratio} samples/s vs off" if label != "off" else _unjudged(result, key, value)
        return f"{key}: {label} ({said or 'nothing measurably beat off'})"
    if lookup(plain, key) == value:
        return _kept(result, key, value, given, _unjudged(result, key, value))
    return f"{key}: {format_value(value)} ({given} had {was}; {ratio} samples/s vs the previous choice)"


def _kept(result: TuneResult, key: str, value: Any, given: str, unjudged: str = "") -> str:
    # a script's null is its own choice (its own optimizer, its own learning rate)
    what = f"the {given}'s own" if value is None else format_value(value)
    beside = any(r.knob == key and r.value != value and r.samples_per_s.median is not None for r in result.rows)
    why = unjudged or ("nothing measurably beat it" if beside else "nothing else was measured beside it")
    return f"{key}: {what} (kept from the {given}: {why})"


def _unjudged(result: TuneResult, key: str, value: Any) -> str:
    """The other candidates of `key` left without a verdict (a busy machine, too few trials), with why; "" when
    none was: a value kept for want of a verdict must not read as one nothing beat."""
    notes = (r for r in result.rows if r.knob == key and r.value != value)
    return "; ".join(f"{r.label} {r.note}" for r in notes if r.note.startswith(UNJUDGED))


def final_lines(result: TuneResult, given: str = "recipe") -> list[str]:
    """What the final check measured, whether the choice was undone, and what the pruner stopped."""
    pruned = [line] if (line := result.pruned_line()) else []
    final = result.final
    if not final:
        return pruned
    lines = [
        f"Tuned vs the {given} as given, measured last: {_ratio(final.ratio)} samples/s "
        f"({_final_verdict(final)}); by median step times "
        f"{_ratio(final.median_step_ratio)}."
    ]
    if final.reached is not None:
        reached = ", ".join(f"{k} {v}" for k, v in final.reached.items())
        lines[0] += f" Time to {result.target}: {_ratio(final.time_ratio)} the {given}'s (reached: {reached})."
    if (grain := grain_line(final.grain, f"{given} as given")) is not None:
        lines.append(grain)
    if (shares := shares_line(result)) is not None:
        lines.append(shares)
    if final.reverted is not None:
        lines.append(
            f"Slower than the {given} as given, so nothing is changed: the {given} stays as it is (the "
            f"measured choice was {final.reverted})."
        )
    return lines + pruned


def _final_verdict(final) -> str:
    if final.verdict:
        return final.verdict
    if final.busy is not None:
        return f"no verdict: the machine was busy during the trials (others took {final.busy:.0%} of the cores)"
    if final.undecided:
        return f"undecided at +-{final.undecided:.0%}: its interval is wider"
    return "too few trials for a verdict"


def _comment(result: TuneResult, base: Recipe, command: str, settings: TrialSettings, trials: int) -> list[str]:
    written = f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}."
    if not result.compared and result.final is None:
        return [written, NOTHING_MEASURED]
    env = result.env
    busy = busy_note(result.loads)
    lines = [
        written,
        *([f"BUSY MACHINE: {busy}"] if busy else []),
        f"Measured on {env.get('device', 'this machine')}, torch {env.get('torch', '?')}: each candidate ran "
        f"{result.trials_ran(trials)} trial(s) in fresh processes, {settings.steps} timed steps after "
        f"{settings.warmup} warm-up.",
        *_rule(result, settings),
    ]
    plain = base.dump()
    lines += [choice_line(result, plain, key, value) for key, value in result.chosen.items()]
    lines += final_lines(result)
    if not result.target and result.chosen.get(BATCH_KEY, base.data.batch_size) != base.data.batch_size:
        lines.append("The batch size changed: it changes optimisation, so re-check the learning rate and accuracy.")
    lines.append("Use: `base: <this file>` in a recipe; keys the recipe sets itself win over a base file.")
    return lines


def _rule(result: TuneResult, settings: TrialSettings) -> list[str]:
    if not result.target:
        return [
            f"A value replaced the previous choice only when measurably faster (its 95% interval above 1.0x, "
            f"by mean samples/s and by median step time both, at least {MIN_TRIALS} trials, none failed)."
        ]
    return [
        f"Objective: the wall time from process start to {result.target}, each trial training on "
        f"{settings.samples} samples (the steps above at the recipe's batch size), evaluated ten times on "
        f"{settings.eval_batches or 'all'} validation batches.",
        *speedups_rule(result),
        f"A value replaced the previous choice only when it reached the target measurably sooner (its 95% "
        f"interval of the time ratio below 1.0x, at least {MIN_TRIALS} trials, every one at the target).",
    ]


def speedups_rule(result: TuneResult) -> list[str]:
    """How the time objective chose its speed-ups, when it searched any."""
    if not any(_by_speed(r) for r in result.rows):
        return []
    return [
        "Speed-ups first, each by samples/s in short trials as the speed objective chooses them (measurably faster "
        f"by mean samples/s and by median step time, at least {MIN_TRIALS} trials, the training loss unchanged "
        "beyond noise), then the chosen ones together against the configuration as given, to the target: kept "
        "when they reached it in every trial, sooner on the median; the learning knobs were searched on top."
    ]


def write_fragment(
    result: TuneResult, path: str | Path, base: Recipe, command: str, settings: TrialSettings, trials: int
) -> Path:
    """The chosen values as a recipe fragment, headed by comments saying what was measured, where and when."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in _comment(result, base, command, settings, trials))
    plain = base.dump()
    # only what differs from the recipe: a value it already has, or a speed-up left off that it lacks, says nothing
    changed = {
        k: v
        for k, v in result.chosen.items()
        if lookup(plain, k) != v and not (lookup(plain, k) is None and v in (None, {"enabled": False}))
    }
    return write_atomic(path, header + yaml.safe_dump(_nested(changed), sort_keys=False))


def check_fragment_out(path: str | Path) -> None:
    """Refuse an --out that tune could not write, or must not replace: a folder, a path under a file, or a file
    that an earlier `accel tune` did not write (a recipe, a hand-edited config); one the command reads (the recipe,
    a `base:` fragment, even one tune wrote) is refused with every command's outputs (accel/cli/outputs.py).
    Called before the search, so a refusal costs nothing, and again before writing."""
    path = Path(path)
    above = next((p for p in path.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise AccelError(f"--out {path}: {above} is a file, not a folder. Choose another --out.")
    if path.is_dir():
        raise AccelError(
            f"--out {path} is a folder; tune writes one YAML file there. Name a file, e.g. {path}/tuned.yaml."
        )
    if not path.exists():
        return
    if not _written_by_tune(path):
        raise AccelError(
            f"--out {path} already exists and was not written by `accel tune`; tune never replaces such a file. "
            "Choose another --out, or move the file away first."
        )


def _written_by_tune(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline().startswith(WRITTEN_BY)
    except (OSError, UnicodeDecodeError):
        return False
