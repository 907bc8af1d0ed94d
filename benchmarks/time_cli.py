"""Time the commands people type first, each in a fresh process: `accel --help`, `accel recipes` (target: under
1 s on 2 cores), and `accel speedups`, which reads the speed-up registry and so imports torch, next to
`import torch` for scale.

    python benchmarks/time_cli.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "accel --help": ["-m", "accel.cli", "--help"],
    "accel recipes": ["-m", "accel.cli", "recipes"],
    "accel speedups": ["-m", "accel.cli", "speedups"],
    "python -c 'import torch'": ["-c", "import torch"],
}


def seconds(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per command (median reported)")
    repeat = parser.parse_args().repeat
    for name, args in COMMANDS.items():
        times = [seconds(args) for _ in range(repeat)]
        print(f"{name:28s} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
