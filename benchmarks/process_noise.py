"""Where a bench's noise lives: between windows of one process, or between processes? (issue: plan the trials at
the level the noise is at)

A plain PyTorch loop (the MLP of benchmarks/calibrate_verdicts.py, about 5 ms a step on 2 threads) is timed in
`--processes` fresh processes, one after another; each times `--windows` windows of `--steps` steps after a warm-up
of 50 steps. Prints the spread (sd of the log) of a window's mean step time within a process, and of a process's
mean between processes, with the per-process means: when the second is much the larger, more steps per trial cannot
narrow a bench's interval, only more trials (or removing what differs between processes) can.

    python benchmarks/process_noise.py --processes 10 --windows 5 --steps 200
    python benchmarks/process_noise.py --threads 1        # the same with one intra-op thread
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

CHILD = """
import json, sys, time, torch
steps, windows, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if threads:
    torch.set_num_threads(threads)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
for _ in range(50):
    step()
means = []
for _ in range(windows):
    tick = time.perf_counter()
    for _ in range(steps):
        step()
    means.append((time.perf_counter() - tick) / steps)
print(json.dumps(means))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    runs = []
    for i in range(args.processes):
        argv = [sys.executable, "-c", CHILD, str(args.steps), str(args.windows), str(args.threads)]
        runs.append(json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout))
        print(f"process {i}: " + " ".join(f"{m * 1e3:.2f}" for m in runs[-1]) + " ms a step", flush=True)
    logs = np.log(np.asarray(runs))
    within = float(np.sqrt(np.mean(np.var(logs, axis=1, ddof=1))))
    between = float(np.std(logs.mean(axis=1), ddof=1))
    print(f"sd of log, a window within its process: {within:.3f}; a process's mean between processes: {between:.3f}")


if __name__ == "__main__":
    main()
