"""report.html and its PNG plots: throughput with intervals, step-time distributions, data wait vs compute.

Figures are built with the object API on an Agg canvas (no pyplot), so nothing touches the global backend
or pyplot's figure registry and no figure outlives its function. The HTML has no scripts or external
styles; the PNGs sit beside it and are referenced by relative path.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .records import Report

PNGS = {"throughput": "throughput.png", "step_times": "step_times.png", "data_wait": "data_wait.png"}


def _figure(n_variants: int) -> tuple[Figure, object]:
    fig = Figure(figsize=(max(6.0, 0.9 * n_variants + 2), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path


def plot_throughput(report: Report, path: Path) -> Path | None:
    """Median samples/s per variant with its 95% interval as error bars; None when no variant has data."""
    rows = [r for r in report.variants if r.samples_per_s.median is not None]
    if not rows:
        return None
    fig, ax = _figure(len(rows))
    med = [r.samples_per_s.median for r in rows]
    lo = [m - r.samples_per_s.ci95[0] for m, r in zip(med, rows)]
    hi = [r.samples_per_s.ci95[1] - m for m, r in zip(med, rows)]
    colors = ["tab:gray" if r.name == report.baseline else "tab:blue" for r in rows]
    ax.bar([r.name for r in rows], med, yerr=[lo, hi], capsize=4, color=colors)
    ax.set_ylabel("samples/s (median, 95% CI)")
    ax.set_title("Throughput per variant")
    ax.tick_params(axis="x", labelrotation=30)
    return _save(fig, path)


def plot_step_times(report: Report, path: Path) -> Path | None:
    """Box plot of timed step durations (all successful trials pooled) per variant."""
    data = {}
    for r in report.variants:
        ms = [s * 1000 for t in r.trials if t.error is None for s in (t.step_times_s or [])]
        if ms:
            data[r.name] = ms
    if not data:
        return None
    fig, ax = _figure(len(data))
    ax.boxplot(list(data.values()), showfliers=True)
    # Set labels on the axis: boxplot's label keyword was renamed in matplotlib 3.9.
    ax.set_xticks(range(1, len(data) + 1), list(data))
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step-time distribution (warm-up excluded)")
    ax.tick_params(axis="x", labelrotation=30)
    return _save(fig, path)


def plot_data_wait(report: Report, path: Path) -> Path | None:
    """Stacked bars: the fraction of step time spent waiting for data vs computing, per variant."""
    rows = [r for r in report.variants if r.data_wait_fraction is not None]
    if not rows:
        return None
    fig, ax = _figure(len(rows))
    names = [r.name for r in rows]
    wait = [min(max(r.data_wait_fraction, 0.0), 1.0) for r in rows]
    ax.bar(names, wait, color="tab:orange", label="data wait")
    ax.bar(names, [1 - w for w in wait], bottom=wait, color="tab:blue", label="compute")
    ax.set_ylim(0, 1)
    ax.set_ylabel("fraction of step time")
    ax.set_title("Data wait vs compute")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside, never over a bar
    ax.tick_params(axis="x", labelrotation=30)
    return _save(fig, path)


def _html_table(table: tuple[list[str], list[list[str]]]) -> str:
    header, rows = table
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in items) + "</ul>"


STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
)


def html_page(title: str, parts: list[str]) -> str:
    """A whole page: `parts` (HTML) under `title`, with the one style every accel page shares."""
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def embedded_png(path: Path, alt: str) -> str:
    """An <img> holding the PNG itself: a report sent alone (mailed, attached to an issue) shows its plots."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _nothing_to_plot(report: Report, key: str) -> str:
    if not any(t.error is None for r in report.variants for t in r.trials):
        return f"No successful trials to plot for {key.replace('_', ' ')}."
    return (  # only data wait can be missing from successful trials
        "No data wait to plot: the trials' batches came from no loader accel measures (an accel loader, a torch "
        "DataLoader, or one given to eng.setup_dataloaders)."
    )


def write_html(
    report: Report,
    out_dir: Path,
    table: tuple[list[str], list[list[str]]],
    notes: list[str],
    failed: list[str],
    busy: str | None = None,
) -> Path:
    """Write the three PNGs and report.html into `out_dir`; returns the HTML path.

    `table`, `notes` (verdicts, recommendation), `failed` and `busy` (the busy-machine warning, shown first)
    come from report.py so the HTML and the
    Markdown say the same thing. A plot with no data is replaced by a sentence saying so.
    """
    out_dir = Path(out_dir)
    makers = {"throughput": plot_throughput, "step_times": plot_step_times, "data_wait": plot_data_wait}
    parts = ["<h1>accel bench report</h1>"]
    if busy:
        parts.append(f"<p><strong>Busy machine.</strong> {html.escape(busy)}</p>")
    parts.append(f"<p>Baseline: <code>{html.escape(report.baseline)}</code></p>")
    if report.command:
        parts.append(f"<p>Command: <code>{html.escape(report.command)}</code></p>")
    parts += [_html_table(table), "<h2>Verdicts</h2>", _html_list(notes), "<h2>Plots</h2>"]
    for key, make in makers.items():
        png = make(report, out_dir / PNGS[key])
        if png is None:
            (out_dir / PNGS[key]).unlink(missing_ok=True)  # never show a stale plot from an earlier run
        parts.append(f"<p>{embedded_png(png, key)}</p>" if png else f"<p>{_nothing_to_plot(report, key)}</p>")
    if failed:
        parts += ["<h2>Failed trials</h2>", _html_list(failed)]
    path = out_dir / "report.html"
    path.write_text(html_page("accel bench report", parts))
    return path
