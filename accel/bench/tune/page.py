"""tune.html: a search's history (every trial as it ran) and each knob's importance (how far its values moved
the objective), beside tune.json.

Optuna's importance evaluators (fANOVA, mean decrease in impurity) fit a model over a study's parameters; a stage's
study here has one parameter, its round, and each knob is measured on its own against the reference beside it.
So a knob's importance is read from those measurements: the spread between its best and worst value, each as a
ratio to the knob's first reference (below 1: sooner to the target, or less time per sample for a speed-up measured
by samples/s; a ladder's rungs chained through the reference each was measured beside), and what its choice bought.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from ...io import write_atomic
from ..plots import _html_list, _html_table, embedded_png, html_page
from .rows import TuneRow
from .search import TuneResult

NEVER = "never reached"
TICKS = (0.25, 0.33, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0)  # the importance plot's ratios


@dataclass(frozen=True)
class Effect:
    """One knob: its values' ratios to its first reference, and what its choice bought."""

    knob: str
    ratios: dict[str, float]  # label -> median ratio to the knob's first reference (below 1: better)
    never: tuple[str, ...]  # the labels of values that never reached the target
    bought: float | None  # the chosen value's ratio, chained over the knob's stages (a learning-rate ladder)

    @property
    def spread(self) -> float:
        """Worst over best: how much getting this knob wrong costs (infinite when a value never got there)."""
        if self.never:
            return math.inf
        return max(self.ratios.values()) / min(self.ratios.values()) if self.ratios else 1.0


def _ratio(row: TuneRow) -> float | None:
    """The row's ratio to its stage's reference as time (below 1: better): time to the target, or the inverse of
    samples/s for a row measured by throughput."""
    if row.time_ratio is not None and row.time_ratio.median is not None:
        return row.time_ratio.median
    if row.target_reached is None and row.ratio.median:  # by samples/s: time per sample
        return 1 / row.ratio.median
    return None


def effects(result: TuneResult) -> list[Effect]:
    """Every knob with a value measured beside another, the most important first."""
    found = []
    for knob in dict.fromkeys(r.knob for r in result.rows):
        rows = [r for r in result.rows if r.knob == knob]
        never = tuple(r.label for r in rows if r.target_reached == 0)
        ratios = _chained(rows)
        if len(ratios) + len(never) >= 2:
            found.append(Effect(knob, ratios, never, _bought(result, knob, rows)))
    return sorted(found, key=lambda e: (-e.spread, e.bought or 1.0))


def _chained(rows: list[TuneRow]) -> dict[str, float]:
    """Label -> its ratio to the knob's first reference: a ladder's rung, measured beside the one before, is
    carried through that one's own ratio (0.001 at 0.7x of 0.0005, then 0.002 at 0.8x of 0.001: 0.56x)."""
    found: dict[str, float] = {}
    for r in rows:
        if (x := _ratio(r)) is not None:
            found.setdefault(r.label, x * found.get(r.against, 1.0))
    return found


def _bought(result: TuneResult, knob: str, rows: list[TuneRow]) -> float | None:
    """The time objective's record of what each lever kept bought (`levers`, a ladder's rungs chained), else the
    chosen value's own ratio (a speed-up by samples/s, a value kept as the reference: 1.0)."""
    mine = [r.median for name, r in result.levers if _of(name, knob) and r is not None and r.median]
    if mine:
        return math.prod(mine)
    chosen = next((r for r in rows if knob in result.chosen and r.value == result.chosen[knob]), None)
    return _ratio(chosen) if chosen is not None else None


def _of(lever: str, knob: str) -> bool:
    """A lever's name (`arg:--lr=0.006`, `speed-ups (speedups.optim=impl=fused)`) is its knob's."""
    return lever == knob or lever.startswith((f"{knob}=", f"{knob} ("))


def importance_table(found: list[Effect]) -> tuple[list[str], list[list[str]]]:
    header = ["knob", "best value", "worst value", "spread (worst/best)", "its choice bought"]
    rows = []
    for e in found:
        best = min(e.ratios, key=e.ratios.get) if e.ratios else None
        worst = e.never[0] if e.never else max(e.ratios, key=e.ratios.get)
        rows.append(
            [
                e.knob,
                f"{best} ({e.ratios[best]:.2f}x)" if best else "n/a",
                f"{worst} ({NEVER})" if e.never else f"{worst} ({e.ratios[worst]:.2f}x)",
                "inf" if math.isinf(e.spread) else f"{e.spread:.2f}",
                "n/a" if e.bought is None else f"{e.bought:.2f}x",
            ]
        )
    return header, rows


def plot_importance(found: list[Effect], path: Path) -> Path:
    """Each knob as a row: its values' ratios (dots, log scale), the one its choice bought (a diamond), a value that
    never reached the target at the right edge (a cross)."""
    fig = Figure(figsize=(8.5, 1.2 + 0.5 * len(found)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    measured = [x for e in found for x in e.ratios.values()] or [1.0]
    right = max(*measured, 1.0) * 1.25
    for y, e in enumerate(reversed(found)):
        xs = list(e.ratios.values())
        ax.plot([min(xs, default=1.0), right if e.never else max(xs, default=1.0)], [y, y], color="tab:gray")
        ax.scatter(xs, [y] * len(xs), color="tab:blue", zorder=3)
        if e.never:
            ax.scatter([right], [y], marker="x", s=80, color="tab:red", zorder=3)
        if e.bought is not None:
            ax.scatter([e.bought], [y], marker="D", s=60, color="tab:green", zorder=4)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    low = min(*measured, *(e.bought for e in found if e.bought), 1.0)
    ax.set_xticks([x for x in TICKS if low * 0.9 <= x <= right * 1.1], minor=False)
    ax.set_xticks([], minor=True)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.set_yticks(range(len(found)), [e.knob for e in reversed(found)], parse_math=False)
    ax.set_xlabel("ratio to the knob's first reference, below 1 better (green: what its choice bought; x: never)")
    ax.set_title("Each knob's importance: the spread of its values")
    fig.savefig(path, dpi=100)
    return path


def plot_history(result: TuneResult, path: Path) -> Path | None:
    """Every trial at the minute it started (in the order run, for trials the runner did not stamp): its time to
    the target (a cross when the pruner stopped it, a triangle at the top when it never got there), or its
    samples/s when the search ranked by speed."""
    trials = result.ran
    if not trials:
        return None
    stamped = all(t.started_at is not None for t in trials)
    start = min(t.started_at for t in trials) if stamped else 0.0
    when = (lambda i, t: (t.started_at - start) / 60) if stamped else (lambda i, t: i)
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    timed = result.target is not None
    value = (lambda t: t.time_to_target_s) if timed else (lambda t: t.samples_per_s)
    top = max((value(t) for t in trials if value(t)), default=1.0) * 1.1
    for label, pick, marker, color in (
        ("reached" if timed else "measured", lambda t: value(t) is not None, "o", "tab:blue"),
        ("pruned", lambda t: timed and t.pruned, "x", "tab:orange"),
        (NEVER, lambda t: timed and value(t) is None and not t.pruned and t.target_evals, "^", "tab:red"),
    ):
        chosen = [(i, t) for i, t in enumerate(trials) if pick(t)]
        if chosen:
            xs = [when(i, t) for i, t in chosen]
            ys = [value(t) if value(t) is not None else top for _, t in chosen]
            ax.scatter(xs, ys, marker=marker, color=color, label=label)
    ax.set_xlabel("minutes into the search (each trial at its start)" if stamped else "trials, in the order run")
    if not stamped:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"seconds to {result.target}" if timed else "samples/s", parse_math=False)
    ax.set_title("The search's history: every trial")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=100)
    return path


def write_page(result: TuneResult, work: Path, lines: list[str]) -> Path:
    """tune.html in `work`: `lines` (what was chosen and why), the importance table and plot, the history."""
    found = effects(result)
    parts = ["<h1>accel tune</h1>", _html_list(lines)]
    with tempfile.TemporaryDirectory(prefix="accel-tune-") as folder:
        parts.append("<h2>Each knob's importance</h2>")
        if found:
            parts += [_html_table(importance_table(found))]
            parts.append(f"<p>{embedded_png(plot_importance(found, Path(folder) / 'knobs.png'), 'importance')}</p>")
        else:
            parts.append("<p>No knob had two values measured.</p>")
        parts.append("<h2>The search's history</h2>")
        history = plot_history(result, Path(folder) / "history.png")
        parts.append(f"<p>{embedded_png(history, 'history')}</p>" if history else "<p>No trial ran.</p>")
    doc = html_page("accel tune", parts)
    return write_atomic(work / "tune.html", doc)
