"""Do the two ways of measuring a script agree? The examples' GPT loop through accel.Engine (its engine measures its
own steps) and its plain twin, unchanged (accel's instrument measures it from outside), benched side by side in one
`accel bench`: a wrapper runs one twin or the other by `--vary env:ACCEL_TWIN=engine,plain`, so their trials are
interleaved and read with the same statistics. The two measure the same loop (the engine with no speed-ups adds
nothing measurable: benchmarks/engine_overhead.py), so the plain twin's samples/s over the engine's should hold 1.0
in its interval.

    python benchmarks/instrument_agreement.py --trials 6 --out benchmarks/results/instrument-agreement.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TWINS = {"engine": ROOT / "examples" / "gpt_loop.py", "plain": ROOT / "examples" / "plain" / "gpt_loop.py"}
WRAPPER = """
import os, runpy, sys
path = {twins!r}[os.environ.get("ACCEL_TWIN", "engine")]  # the probe: the engine twin
sys.argv[0] = path
sys.path[:0] = [os.path.dirname(path), os.path.dirname(os.path.dirname(path))]  # the examples' own imports
runpy.run_path(path, run_name="__main__")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "twin.py"
        wrapper.write_text(WRAPPER.format(twins={k: str(v) for k, v in TWINS.items()}))
        bench = Path(tmp) / "bench"
        command = [sys.executable, "-m", "accel.cli", "bench", "--vary", "env:ACCEL_TWIN=engine,plain"]
        command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--trials", str(args.trials)]
        command += ["--out", str(bench), "--", sys.executable, str(wrapper), "--steps", "100000"]
        command += ["--data", str(Path(tmp) / "gpt-bytes")]
        subprocess.run(command, check=True, cwd=ROOT)
        report = json.loads((bench / "report.json").read_text())
    engine, plain = report["variants"]
    figures = {
        "engine_samples_per_s": engine["samples_per_s"],
        "plain_samples_per_s": plain["samples_per_s"],
        "plain_over_engine": plain["ratio_vs_baseline"],
        "verdict": plain["verdict"],
        "busy": plain.get("busy"),
        "trials": args.trials,
        "steps": args.steps,
        "warmup": args.warmup,
        "env": report["env"],
    }
    ratio = figures["plain_over_engine"]
    print(
        f"engine {engine['samples_per_s']['median']:.1f} samples/s, plain (instrument) "
        f"{plain['samples_per_s']['median']:.1f}: plain/engine {ratio['median']:.3f} "
        f"[{ratio['ci95'][0]:.3f}, {ratio['ci95'][1]:.3f}], verdict {plain['verdict']}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
