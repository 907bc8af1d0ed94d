"""What a trial's room costs per trial (accel/bench/isolation.py): the start of a process in its own view of the
file system against a plain start, the audit hooks' cost on a Python process that imports torch (the fallback), and
the before/after record of the folder a trial can reach.

    python benchmarks/room_cost.py --repeats 10 --folder .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accel.bench import file_record, isolation
from accel.engine import trial_variables

IMPORT_TORCH = "import torch, numpy; torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum().backward()"
HOOKED = f"from accel.trial import backups; backups.start(); {IMPORT_TORCH}"


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _median_ms(run, repeats: int) -> float:
    run()  # warm the page cache
    return 1000 * statistics.median(run() for _ in range(repeats))


def starts(repeats: int) -> dict[str, float]:
    """A process that does nothing, plainly and in the room (namespace: entry, overlays, pivot, exec)."""
    true = [sys.executable, "-I", "-S", "-c", "pass"]
    with tempfile.TemporaryDirectory() as folder:
        stage = Path(folder, "stage")

        def roomed() -> float:
            stage.mkdir(exist_ok=True)
            return _timed(isolation._entered(stage, [Path(folder)], true))

        plain = _median_ms(lambda: _timed(true), repeats)
        return {"plain start ms": plain, "start in its own view ms": _median_ms(roomed, repeats)}


def hooks(repeats: int) -> dict[str, float]:
    """A Python process importing torch and stepping once, with and without the fallback's audit hook."""
    env = dict(os.environ)
    plain = _median_ms(lambda: _timed([sys.executable, "-c", IMPORT_TORCH], env), repeats)
    with tempfile.TemporaryDirectory() as folder:
        hooked_env = env | {trial_variables.JOURNAL: str(Path(folder, "journal.jsonl"))}
        hooked = _median_ms(lambda: _timed([sys.executable, "-c", HOOKED], hooked_env), repeats)
    return {"import torch ms": plain, "import torch, audit hook on ms": hooked}


def records(folder: Path, repeats: int) -> dict[str, float]:
    """Two records (before and after) of `folder` and their comparison."""

    def twice() -> float:
        start = time.perf_counter()
        before = file_record.record([folder], [])
        file_record.compare(before, file_record.record([folder], []))
        return time.perf_counter() - start

    paths = len(file_record.record([folder], []).entries)
    return {"paths recorded": paths, "record before + after ms": _median_ms(twice, repeats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--folder", type=Path, default=Path("."), help="a folder a trial reaches (its working one)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/room_cost.json"))
    args = parser.parse_args()
    refusal = isolation.namespace_refusal()
    figures = {"namespaces": refusal or "available"}
    figures |= starts(args.repeats) if refusal is None else {}
    figures |= hooks(args.repeats) | records(args.folder.resolve(), args.repeats)
    for name, value in figures.items():
        print(f"{name:<34} {value:.1f}" if isinstance(value, float) else f"{name:<34} {value}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
