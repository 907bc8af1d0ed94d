"""What accel.Engine's own code costs a step of a hand-written loop, read from a profile rather than from two
noisy wall clocks: each example loop runs under cProfile in a fresh process, and the self time of every function
in accel's files is summed (the torch calls they make are the loop's own work, which the plain loop makes too).
cProfile slows Python-heavy code more than torch's kernels, so the share is an upper bound.

Three runs per loop: the plain script (the control: no accel code runs), the script through the engine, and the
same under a bench trial's variables (`accel bench -- python train.py`: the engine times every step and stops the
script after warm-up + N steps).

    python benchmarks/engine_self_time.py                      # both loops, 300 optimizer steps of each
    python benchmarks/engine_self_time.py --loops gpt --steps 600 --out benchmarks/results/engine-self-time.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from engine_overhead import NO_SPEEDUPS, ROOT  # benchmarks/: the overhead script's switch for the examples

# each loop's arguments for `steps` optimizer steps: the GPT loop counts steps, the ResNet loop one epoch of
# `samples / batch` steps
LOOPS = {
    "gpt": lambda steps: ["--steps", str(steps), "--eval-every", "100000", "--batch", "16", "--block", "64"],
    "resnet": lambda steps: ["--epochs", "1", "--samples", str(32 * steps), "--batch", "32", "--size", "32"],
}

CHILD = r"""
import cProfile, json, pstats, runpy, sys, time
script, out, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, str(__import__("pathlib").Path(script).resolve().parent))  # as `python SCRIPT` has it
sys.argv = [script, *argv]
profile = cProfile.Profile()
start = time.perf_counter()
profile.enable()
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:  # a bench trial ends the script after its steps
    pass
finally:
    profile.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile).stats
    accel = [(tt, nc, f"{f.split('/accel/')[1]}:{line} {name}") for (f, line, name), (_, nc, tt, _, _) in
             stats.items() if "/accel/" in f and "/examples/" not in f]
    accel.sort(reverse=True)
    json.dump({"wall_s": wall, "accel_s": sum(t for t, _, _ in accel), "top": accel[:8]}, open(out, "w"))
"""


def profile_run(script: Path, args: list[str], env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.json"
        subprocess.run(
            [sys.executable, "-c", CHILD, str(script), str(out), *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS))
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of each run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = ["--data", str(Path(tmp) / "bytes")]
        for loop in args.loops:
            loop_args = LOOPS[loop](args.steps) + (data if loop == "gpt" else [])
            settings = NO_SPEEDUPS if loop == "resnet" else {}
            trial = {
                "ACCEL_TRIAL": str(Path(tmp) / f"{loop}-trial.json"),
                "ACCEL_TRIAL_WARMUP": "3",
                "ACCEL_TRIAL_STEPS": str(args.steps - 3),
            }
            runs = {
                "plain": profile_run(ROOT / "examples" / "plain" / f"{loop}_loop.py", loop_args, {}),
                "engine": profile_run(ROOT / "examples" / f"{loop}_loop.py", loop_args, settings),
                "engine under a bench trial": profile_run(
                    ROOT / "examples" / f"{loop}_loop.py", loop_args, {**settings, **trial}
                ),
            }
            results[loop] = runs
            print(f"{loop}, {args.steps} optimizer steps:")
            for name, run in runs.items():
                per_step_ms = 1000 * run["accel_s"] / args.steps
                share = run["accel_s"] / run["wall_s"]
                print(f"  {name:28} accel's own code {per_step_ms:6.3f} ms a step, {share:6.2%} of the run's time")
            for seconds, calls, where in runs["engine under a bench trial"]["top"][:5]:
                print(f"    {1000 * seconds / args.steps:6.3f} ms a step  {calls:6d} calls  {where}")
    if args.out:
        args.out.write_text(json.dumps({"steps": args.steps, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
