"""Do the bench's verdicts hold on this machine? Repeated A/A benches and benches of a known slowdown, tallied.

A plain PyTorch loop (an MLP, about 5 ms a step on 2 CPU threads, no accel in it) is benched unchanged with
`accel bench --vary env:SLOW=0,X -- python loop.py`: with X=0 the two variants differ only in a variable the loop
never reads (an A/A, which must read "no effect" or withhold, never helped or hurt), with X > 0 the second sleeps X
seconds a step (a known slowdown, X/step time). A sleep overshoots by tens of microseconds, so small slowdowns are
made by work instead: `--work N` benches `env:WORK=0,N`, whose second variant multiplies a 128x256 by a 256x256
matrix N more times a step (4-6% of the step each here). Each bench is a fresh `accel bench` with the options
given after `--` (default: the bench's own planning from the noise). Prints one line per bench and the tally per
case, and writes JSON.

    python benchmarks/calibrate_verdicts.py --benches 10 --slow 0 0.0005 --work 1 -- --resolution 5%
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

LOOP = """
import os, time, torch
torch.manual_seed(0)
SLOW = float(os.environ.get("SLOW", "0"))
WORK = int(os.environ.get("WORK", "0"))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
extra = torch.randn(256, 256)
for step in range(100_000):
    if SLOW:
        time.sleep(SLOW)
    for _ in range(WORK):
        x @ extra
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def one_bench(folder: Path, case: tuple[str, float], extra: list[str]) -> dict:
    out = folder / f"bench-{time.time_ns()}"
    name, amount = case
    vary = f"env:{name}=0,{amount:g}" if amount else "env:UNREAD=a,b"  # an A/A: the loop never reads UNREAD
    argv = [sys.executable, "-m", "accel.cli", "bench", "--vary", vary, "--out", str(out), *extra]
    tick = time.perf_counter()
    done = subprocess.run([*argv, "--", sys.executable, str(folder / "loop.py")], capture_output=True, text=True)
    seconds = time.perf_counter() - tick
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    if report is None:
        return {"case": _label(case), "error": done.stderr[-500:], "seconds": seconds}
    row = report["variants"][1]
    verdict = row["verdict"] or ("busy" if row.get("busy") else "undecided" if row.get("undecided") else "none")
    return {
        "case": _label(case),
        "verdict": verdict,
        "ratio": row["ratio_vs_baseline"],
        "trials": row["ok_trials"],
        "seconds": seconds,
        "exit": done.returncode,
    }


def _label(case: tuple[str, float]) -> str:
    return f"{case[0]}={case[1]:g}" if case[1] else "A/A"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benches", type=int, default=5, help="benches per case")
    parser.add_argument("--slow", type=float, nargs="+", default=[0.0, 0.0005], help="seconds slept a step")
    parser.add_argument("--work", type=int, nargs="*", default=[], help="extra matrix products a step")
    parser.add_argument("--json", default="benchmarks/results/calibrate_verdicts.json")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="accel-calibrate-") as tmp:
        folder = Path(tmp)
        (folder / "loop.py").write_text(LOOP)
        cases = [("SLOW", slow) for slow in args.slow] + [("WORK", work) for work in args.work]
        for i in range(args.benches):
            for case in cases:  # the cases interleaved, as a bench's variants are
                rows.append(one_bench(folder, case, extra))
                r = rows[-1]
                ratio = r.get("ratio") or {}
                print(
                    f"[{i + 1}/{args.benches}] {r['case']}: {r.get('verdict', 'FAILED')} "
                    f"{ratio.get('median') or float('nan'):.3f}x {ratio.get('ci95')} "
                    f"{r.get('trials')} trials, {r['seconds']:.0f} s",
                    flush=True,
                )
    for label in dict.fromkeys(r["case"] for r in rows):
        case = [r for r in rows if r["case"] == label]
        tally = Counter(r.get("verdict", "failed") for r in case)
        seconds = sorted(r["seconds"] for r in case)
        print(f"{label}: {dict(tally)}; median {seconds[len(seconds) // 2]:.0f} s a bench")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"options": extra, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
