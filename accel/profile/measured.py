"""What a bench already measured of a piece of advice: where a bench of the same recipe or script (a report.json
beside the profile's folder, as `runs/` holds them) measured the change a rule advises, the advice says what it
found, so a profile never repeats a hypothesis the user has already seen refuted, nor an estimate the bench's
figure contradicts."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.variants import vary_variants

REFUTED = ("hurt", "no effect")


def benches_of(folder: Path, source: str) -> list[tuple[Path, dict[str, Any]]]:
    """The reports of benches of `source` beside `folder`, newest first: read once for every rule."""
    ours = _source(source)
    reports = ((path, _read(path)) for path in sorted(folder.parent.glob("*/report.json"), key=_mtime, reverse=True))
    return [(path, report) for path, report in reports if report and _source(report.get("recipe")) == ours]


@dataclass(frozen=True)
class Measured:
    """A bench's reading of an advised change: samples/s over the run's as it was, its 95% interval, its verdict."""

    median: float
    ci95: tuple[float, float] | None
    verdict: str
    folder: Path
    busy: bool  # the machine was busy during its trials: the bench states no verdict, and neither does this

    @property
    def said(self) -> str:
        interval = f" [{self.ci95[0]:.2f}, {self.ci95[1]:.2f}]" if self.ci95 else ""
        return f"{self.median:.2f}x{interval} ({self.verdict}{', busy machine' if self.busy else ''}) in {self.folder}"

    @property
    def refuted(self) -> bool:
        """The bench found the change no faster: the advice is a hypothesis it already tested."""
        return self.verdict in REFUTED

    def contradicts(self, estimate: float) -> bool:
        """The bench's interval leaves out `estimate`: the measurement stands, the estimate goes."""
        return not self.busy and self.ci95 is not None and not self.ci95[0] <= estimate <= self.ci95[1]


def bench_measured(benches: list[tuple[Path, dict[str, Any]]], bench_options: str) -> Measured | None:
    """What the latest of `benches` that measured the change `bench_options` (a rule's `--vary KEY=OFF,ON`) makes
    found; None where none measured it."""
    change = _change(bench_options)
    for path, report in benches:
        variant = next((v for v in report.get("variants", []) if _makes(v.get("overrides") or {}, change)), None)
        ratio = (variant or {}).get("ratio_vs_baseline") or {}
        if ratio.get("median") is not None:
            ci95 = tuple(ratio["ci95"]) if ratio.get("ci95") else None
            verdict = variant.get("verdict") or "no verdict"
            return Measured(ratio["median"], ci95, verdict, path.parent, variant.get("busy") is not None)
    return None


def _change(bench_options: str) -> dict[str, Any]:
    """The keys a rule's `--vary KEY=OFF,ON` items switch, at their last (the advised) value."""
    words = shlex.split(bench_options)
    items = [words[i + 1] for i, word in enumerate(words) if word == "--vary" and i + 1 < len(words)]
    return dict(vary_variants(items)[-1].overrides) if items else {}


def _makes(overrides: dict[str, Any], change: dict[str, Any]) -> bool:
    return bool(change) and all(overrides.get(key) == value for key, value in change.items())


def _source(text: str | None) -> str | None:
    """A recipe as its resolved path (a shipped name and its file are one), a script as its command line."""
    from ..config.shipped import find_recipe
    from ..errors import AccelError

    if text is None:
        return None
    try:
        return str(find_recipe(text).resolve())
    except (AccelError, OSError):
        return text


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
