"""Does accel.Engine add time to a hand-written loop? The examples' plain loops against the same loops through the
engine with no speed-ups, each run a fresh process, interleaved round by round (the order flips every round, so
neither side always runs first on a warmer machine).

Each run prints its own training time (after its set-up: data, model, engine), taken from the script's
`N steps in X s` / `N epochs in X s` line; the ratio is plain time / engine time per round (above 1: the engine is
faster), reported as the median over rounds with a bootstrap 95% interval and the range. Both sides run the same
steps and evaluations on the same data with the same seed; the GPT loops print the same losses (a test checks).

With `--instrument` the other side is the plain loop itself, unchanged, with accel's instrument loaded as a bench
trial loads it (accel/trial/instrument: every optimizer step counted and timed, the model's forward hooked, the loss
kept), in its own-run mode, so the loop trains to its end:

    python benchmarks/engine_overhead.py --rounds 6 --out benchmarks/results/engine-overhead.json
    python benchmarks/engine_overhead.py --device cuda --loops gpt --rounds 4 --set steps=600   # on a GPU
    python benchmarks/engine_overhead.py --loops gpt --rounds 8 --set steps=10   # what the engine does once

Short runs show what the engine does once, in a loop's first steps (benchmarks/engine_step_cost.py pairs steps
after a warm-up and cannot): the speed lint's thread-pool introspection once cost the GPT loop's next step 0.2 s.
    python benchmarks/engine_overhead.py --instrument --loops gpt --rounds 8 \
        --out benchmarks/results/instrument-overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from accel import devices  # noqa: E402
from accel.bench.stats import bootstrap_median_ci  # noqa: E402
from accel.bench.trial_process import instrumented_pythonpath  # noqa: E402
from accel.engine import trial_variables  # noqa: E402

LOOPS = {
    "gpt": ["--steps", "300", "--eval-every", "1000", "--batch", "16", "--block", "64"],
    "resnet": ["--epochs", "2", "--samples", "1024", "--batch", "32", "--size", "32"],
}
# the resnet example asks for bf16 and channels_last: switched off from outside, as a user would
NO_SPEEDUPS = {"ACCEL_SET": "speedups.amp.enabled=false speedups.channels_last.enabled=false"}
TIME = re.compile(r"^\d+ (?:steps|epochs) in ([0-9.]+) s$", re.M)


def run(script: Path, args: list[str], env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(f"{script} failed:\n{done.stderr[-2000:]}")
    return float(TIME.search(done.stdout).group(1))


def instrumented(record: Path) -> dict[str, str]:
    """A bench trial's variables for the instrument, in its own-run mode (no step count: the loop runs to its end)."""
    return {"PYTHONPATH": instrumented_pythonpath(), trial_variables.PATH: str(record), trial_variables.STEPS: "0"}


def with_overrides(loop_args: list[str], overrides: list[str]) -> list[str]:
    """The loop's arguments with `NAME=V` overrides applied (`steps=600` sets `--steps 600`)."""
    loop_args = list(loop_args)
    for override in overrides:
        name, _, value = override.partition("=")
        flag = f"--{name.replace('_', '-')}"
        if flag in loop_args:
            loop_args[loop_args.index(flag) + 1] = value
        else:
            loop_args += [flag, value]
    return loop_args


def _rounds(name: str, args: argparse.Namespace, data: Path) -> dict:
    """One loop's interleaved rounds, plain against the other side; its times and ratios."""
    loop_args = with_overrides(LOOPS[name], args.set) + ["--device", args.device]
    loop_args += ["--data", str(data / "bytes")] if name == "gpt" else []
    plain, engine = ROOT / "examples" / "plain" / f"{name}_loop.py", ROOT / "examples" / f"{name}_loop.py"
    other = (plain, instrumented(data / "trial.json")) if args.instrument else (engine, NO_SPEEDUPS)
    run(plain, loop_args, {})  # warm the file cache and write the data once
    times: dict[str, list[float]] = {"plain": [], "engine": []}
    for round_ in range(args.rounds):
        order = ["plain", "engine"] if round_ % 2 == 0 else ["engine", "plain"]
        for side in order:
            script, env = (plain, {}) if side == "plain" else other
            times[side].append(run(script, loop_args, env))
        print(f"{name} round {round_ + 1}: plain {times['plain'][-1]:.2f} s, other {times['engine'][-1]:.2f} s")
    ratios = [p / e for p, e in zip(times["plain"], times["engine"], strict=True)]
    other_name = "instrumented" if args.instrument else "engine"
    _, (low, high) = bootstrap_median_ci(ratios)
    print(
        f"{name}: plain/{other_name} time ratio {statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}] "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} rounds)"
    )
    return {
        "args": loop_args,
        "seconds": times,
        "ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "ratio_ci95": [low, high],
        "ratio_range": [min(ratios), max(ratios)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--device", default="cpu", help="passed to both loops (their --device)")
    parser.add_argument(
        "--instrument", action="store_true", help="the plain loop with accel's instrument loaded, not the engine loop"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="ARG=V", help="override a loop argument, e.g. steps=600"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accel-overhead-") as data:  # the loops' byte corpus, written once
        results = {name: _rounds(name, args, Path(data)) for name in args.loops}
    record = {
        "machine": devices.cpu_model(),
        "cpu_class": devices.cpu_class(),  # the engine's costs differ by class (docs/benchmarks.md)
        "cores": os.cpu_count(),
        "device": args.device,
        "other": "the plain loop, instrumented" if args.instrument else "the engine loop",
        "results": results,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
