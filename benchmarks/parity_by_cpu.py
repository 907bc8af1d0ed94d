"""accel/plain parity by CPU class: every recorded `compare_plain_loop.py` result, grouped by the class of CPU it
was measured on (AMX, AVX512-BF16, AVX2, ...), so a regression on one class shows beside the others' figures.

The same Trainer can be at parity on one class and not on another: a cost accel pays only where the CPU has fast
bf16 (the speed lint's matmul probe, 0.6 s a run on a 2-core AMX Xeon until it was cached) is invisible on the
others. Results written before `cpu_class` was recorded get theirs from the CPU's name and bf16 support, marked
"from its name". Exits 1 when a result's whole interval lies above the target ("not within").

python benchmarks/parity_by_cpu.py                  # benchmarks/results/compare-plain-*.json
python benchmarks/parity_by_cpu.py runs/compare_plain_loop.json ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
TARGET = 1.03  # compare_plain_loop.TARGET; read without importing torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="compare_plain_loop.py JSON files")
    return parser.parse_args(argv)


def cpu_class(result: dict) -> str:
    """The class the result names, else the one its CPU's name and bf16 support imply on the machines these
    results came from (an Intel Xeon with bf16 had AMX; an AMD EPYC, AVX512-BF16)."""
    env = result.get("env", {})
    named = result.get("cpu_class") or env.get("cpu_class")
    if named:
        return named
    if not env.get("cpu_native_bf16", True):
        implied = "AVX2"
    elif "Intel" in env.get("cpu", ""):
        implied = "AMX"
    elif "AMD" in env.get("cpu", ""):
        implied = "AVX512-BF16"
    else:
        implied = "unknown"
    return f"{implied} (from its name)"


def row(path: Path, result: dict) -> dict:
    whole, step = result["ratio_accel_over_plain"], result.get("step_ratio_accel_over_plain")
    return {
        "class": cpu_class(result),
        "file": path.name,
        "when": " ".join(filter(None, (result.get("date"), result.get("commit")))) or "-",
        "speedups": ", ".join(result.get("speedups_applied") or []) or "none",
        "whole": whole,
        "step": step,
        "verdicts": [result["verdict"], result.get("step_verdict")],
    }


def interval(ratio: dict | None) -> str:
    if ratio is None:
        return "-"
    low, high = ratio["ci95"]
    return f"{ratio['median']:.3f} [{low:.3f}, {high:.3f}]"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    paths = args.results or sorted((HERE / "results").glob("compare-plain-*.json"))
    rows = sorted((row(p, json.loads(p.read_text())) for p in paths), key=lambda r: r["class"])
    print(f"{'CPU class':<28} {'whole rounds':<24} {'median steps':<24} {'speed-ups':<14} {'when':<24} file")
    for r in rows:
        print(
            f"{r['class']:<28} {interval(r['whole']):<24} {interval(r['step']):<24} {r['speedups']:<14} "
            f"{r['when']:<24} {r['file']}"
        )
    above = [r for r in rows if "not within" in r["verdicts"]]
    for r in above:
        print(f"above the target ({TARGET}) on {r['class']}: {r['file']}")
    print(f"(target: accel/plain time <= {TARGET}, the whole 95% interval; {len(rows)} results)")
    return 1 if above else 0


if __name__ == "__main__":
    sys.exit(main())
