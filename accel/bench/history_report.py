"""`accel history FILE [--html OUT]`: samples/s (and time to target where measured) per commit per machine, as a
table and a plot, with the commits where the figure stepped marked (accel/bench/change_points.py).

A series is one machine (its fingerprint) and one set of --vary values; its points are commits in the order of
their dates, each the median of every measurement of that commit there that a verdict could rest on. A reading
taken on a busy machine is shown, marked, and left out of the point where a quiet one exists and out of the search
for steps always (a busy spell once made the slow commit the fastest in the series); one whose comparison with
its bench's reference decided nothing is marked.
"""

from __future__ import annotations

import html
import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..io import write_atomic
from .change_points import change_points
from .history import HistoryEntry, machine_said
from .plots import embedded_png, html_page


@dataclass
class Point:
    """One commit in one series: the median of its measurements there."""

    point: str
    subject: str
    date: str | None
    entries: list[HistoryEntry] = field(default_factory=list)

    @property
    def trusted(self) -> list[HistoryEntry]:
        """Its quiet readings; all of them when every one was busy."""
        return [e for e in self.entries if e.busy is None] or self.entries

    @property
    def busy(self) -> bool:
        """Every reading of it was taken on a busy machine."""
        return all(e.busy is not None for e in self.entries)

    @property
    def mark(self) -> str:
        """Why its figure decides nothing, or ""."""
        if self.busy:
            others = max(e.busy for e in self.entries)
            return f"busy (others took {others:.0%}): not in the step search"
        if all(e.undecided for e in self.trusted):
            return f"undecided against {self.trusted[0].against}"
        if self.samples_per_s is not None and not self.positive:
            return "no speed (0 or below): not in the step search"
        return ""

    @property
    def samples_per_s(self) -> float | None:
        values = [e.samples_per_s for e in self.trusted if e.samples_per_s is not None]
        return statistics.median(values) if values else None

    @property
    def positive(self) -> bool:
        """A speed the step search can read (it compares logs); a line of a hand-made history may hold 0 or less."""
        return self.samples_per_s is not None and self.samples_per_s > 0

    @property
    def half_width(self) -> float | None:
        """The median half-width of its intervals, in log units."""
        widths = [math.log(e.ci95[1] / e.ci95[0]) / 2 for e in self.trusted if e.ci95 and 0 < e.ci95[0] <= e.ci95[1]]
        return statistics.median(widths) if widths else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The median ends of its benches' 95% intervals."""
        spans = [e.ci95 for e in self.trusted if e.ci95]
        return (statistics.median(lo for lo, _ in spans), statistics.median(hi for _, hi in spans)) if spans else None

    @property
    def time_to_target_s(self) -> float | None:
        values = [e.time_to_target_s for e in self.entries if e.time_to_target_s is not None]
        return statistics.median(values) if values else None


@dataclass
class Series:
    machine: str
    said: str
    vary: str
    points: list[Point]
    steps: dict[int, float]  # index of the point that starts a new level -> its relative step

    @property
    def title(self) -> str:
        return f"{self.said}{f' ({self.vary})' if self.vary else ''} [machine {self.machine}]"


def series(found: list[HistoryEntry]) -> list[Series]:
    """The entries as series, each with its change points."""
    grouped: dict[tuple[str, str], dict[str, Point]] = {}
    said = {}
    for entry in found:
        points = grouped.setdefault((entry.machine, entry.vary), {})
        said[entry.machine] = machine_said(entry.fingerprint)
        point = points.setdefault(entry.point, Point(entry.point, entry.subject, entry.commit_date))
        point.entries.append(entry)
    out = []
    for (machine, vary), points in grouped.items():
        ordered = sorted(points.values(), key=lambda p: p.date or "")  # stable: first measured first among equals
        measured = [p for p in ordered if p.positive and not p.busy]
        widths = [p.half_width for p in measured if p.half_width is not None]
        steps = change_points([p.samples_per_s for p in measured], widths) if len(measured) > 1 else {}
        # indices into the measured points, as indices into all of them
        steps = {ordered.index(measured[i]): s for i, s in steps.items()}
        out.append(Series(machine, said[machine], vary, ordered, steps))
    return out


HEADER = ["commit", "date", "subject", "samples/s", "runs", "change", "mark"]
TARGET = "time to target s"  # a column only where a bench measured one


def table(s: Series) -> tuple[list[str], list[list[str]]]:
    """The series' header and rows: a commit a row, its step marked."""
    targeted = any(p.time_to_target_s is not None for p in s.points)
    rows = []
    for i, p in enumerate(s.points):
        sps, target = p.samples_per_s, p.time_to_target_s
        row = [p.point, (p.date or "")[:10], p.subject[:50], f"{sps:,.1f}" if sps is not None else "failed"]
        row += [f"{target:.1f}" if target is not None else "never reached"] if targeted else []
        rows.append(row + [str(len(p.entries)), f"stepped {s.steps[i]:+.0%}" if i in s.steps else "", p.mark])
    return HEADER[:4] + ([TARGET] if targeted else []) + HEADER[4:], rows


def text(all_series: list[Series]) -> str:
    """The table per series, as `accel history` prints it."""
    out = []
    for s in all_series:
        header, body = table(s)
        rows = [header, *body]
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        out += [s.title]
        out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        out += [""]
    return "\n".join(out).rstrip() + "\n"


MAX_WIDTH_IN = 60.0  # matplotlib refuses an image over 2**16 pixels wide: a long series' points get closer


def plot(s: Series, path: Path) -> Path:
    """samples/s per commit with its interval, each change point marked with a dashed line and its step. The
    history's own text (revision names, --vary values, the machine) is drawn as it is: never read as mathtext."""
    fig = Figure(figsize=(min(max(6.0, 0.6 * len(s.points) + 2), MAX_WIDTH_IN), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = [i for i, p in enumerate(s.points) if p.samples_per_s is not None]
    ys = [s.points[i].samples_per_s for i in xs]
    spans = [_around(y, s.points[i].interval) for i, y in zip(xs, ys)]
    errors = [[y - lo for y, (lo, _) in zip(ys, spans)], [hi - y for y, (_, hi) in zip(ys, spans)]]
    ax.errorbar(xs, ys, yerr=errors, marker="o", color="tab:blue", capsize=3)
    busy = [i for i in xs if s.points[i].busy]
    if busy:  # shown, but not what the line says: no verdict rests on them
        ax.scatter(busy, [s.points[i].samples_per_s for i in busy], marker="x", s=80, color="tab:gray", zorder=3)
    for i, step in s.steps.items():
        ax.axvline(i - 0.5, color="tab:red", linestyle="--")
        ax.annotate(
            f"{step:+.0%}",
            (i - 0.5, s.points[i].samples_per_s),
            color="tab:red",
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xticks(range(len(s.points)), [p.point for p in s.points], parse_math=False)
    ax.tick_params(axis="x", labelrotation=30)
    if min(ys, default=0) >= 0:  # speeds from 0 up; a hand-made line's negative figure keeps its own scale
        ax.set_ylim(bottom=0)
    ax.set_ylabel("samples/s (median)")
    ax.set_title(s.title, fontsize=9, parse_math=False)
    fig.savefig(path, dpi=100)
    return path


def _around(y: float, interval: tuple[float, float] | None) -> tuple[float, float]:
    """The interval's ends where they hold the figure, else the figure itself (no bar)."""
    return interval if interval is not None and interval[0] <= y <= interval[1] else (y, y)


def write_html(all_series: list[Series], out: Path, source: Path) -> Path:
    """A page with each series' table and plot (its PNG inside the page, nothing beside it)."""
    parts = [f"<h1>accel history</h1><p>From <code>{html.escape(str(source))}</code></p>"]
    for s in all_series:
        parts += _section(s)
    doc = html_page("accel history", parts)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(Path(out), doc)


def _section(s: Series) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="accel-history-") as folder:
        try:
            png = embedded_png(plot(s, Path(folder) / "plot.png"), f"samples/s per commit on {s.title}")
        except (ValueError, OverflowError) as err:  # figures of a hand-made line past what an axis can span
            png = html.escape(f"No plot: its figures span more than matplotlib can draw ({err}); the table has them.")
    header, rows = table(s)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return [f"<h2>{html.escape(s.title)}</h2>", f"<table><tr>{head}</tr>{body}</table>", f"<p>{png}</p>"]
