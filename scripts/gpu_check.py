#!/usr/bin/env python
"""Every CUDA path of accel run for real on a GPU machine, with the figures, into one JSON file of raw results.

Steps (default: all, in this order; name some to run only those):
  env         device, driver, torch / CUDA / cuDNN versions
  peaks       measured matmul rate per dtype and copy bandwidth (the MFU denominators): benchmarks/peak_rates.py
  tests       the `cuda`-marked tests, every outcome
  plain-loop  ResNet-18 batch 512: accel with no speed-ups vs a plain fp32 loop (loop overhead)
  ablate      accel bench --ablate of cifar10-resnet18-cuda (fast-cuda preset vs fp32 eager),
              with FLOPs per step counted and MFU for every variant; `ablate-remove` (baseline, all, -NAME)
              and `ablate-add` (baseline, +NAME) run its two halves, to fit a machine's time limit per command;
              `preset` runs baseline, all and -compile only
  transformer GPT-2-small shape in plain PyTorch: precisions, attention kernels, compile
  lm          accel bench of lm-bytes-cuda (a 101M-parameter GPT): `lm-remove` (baseline, all,
              -NAME), `lm-add` (+NAME), `lm-vary` (whole vs regional compile, float8, activation checkpointing),
              MFU per variant from accel's own FLOP count
  profile     where a step of the ResNet preset goes, compiled and eager: accel profile
  jpeg        a real JPEG folder fed to the GPU: plain ImageFolder, tuned loader, decoded cache, DALI `mixed`

Run only when named (the standing GPU issue's figures):
  lm-levers   lm-bytes-cuda with each speedrun lever against the recipe: the compiled optimizer step, whole-step
              CUDA graphs, the fused LM loss
  lm-scale    batch 32 against 16, then compile mode max-autotune at batch 32
  lm-shape    at batch 32, the model's shape: 8 heads of 128 against 16 of 64, then width 2048 against 1024 (the
              larger matmuls a 50% MFU may need; each changes the model, so read its val_loss); `lm-width` the
              width alone
  lm-muon     time to val_loss 1.6 from each trial's process start: AdamW against Muon
  lm-tune     what `accel tune` picks for lm-bytes-cuda on the GPU (8 minutes)
  lm-time     what `accel tune --objective time` picks for it (8 minutes)
  resnet-host the compiled ResNet preset with inductor's compile workers released, and with CUDA graphs, on/off
  resnet-sync what the bench's sync after every step hides: the ResNet preset compiled and eager, benched with
              `--sync step` (the default) and `--sync window` (a real run's overlap of host and GPU)
  hf-script   an unchanged Hugging Face Trainer script (examples/hf_trainer.py, a 6-layer GPT-2 of width 768, 256
              tokens) benched with its own flags: --bf16, --tf32, --torch_compile, each against the script as given
  hf-compile  the same script with --torch_compile, --tf32 True against False: where its compiled fp32 step gets
              its rate (85 TFLOP/s on an H100 with --tf32 False, above the fp32 peak)
  own-loop    the examples' GPT loop on the GPU, plain against accel.Engine: paired single steps in one process
              (benchmarks/engine_step_cost.py), then fresh-process rounds (benchmarks/engine_overhead.py)
  own-bench   `accel bench --ablate -- python examples/gpt_loop.py --bf16` there

Each step runs its commands as subprocesses and adds {command, rc, seconds, output tail, result} to
OUT/gpu-check.json, rewritten after every step (a step that runs out of time leaves the others' results);
a later run with the same OUT adds its steps to the same file.
Raw outputs (bench folders, logs) are packed into OUT/raw.tar.gz. `--quick` shrinks every figure to a few
steps, to check the script itself on any machine (`--device cpu`).

    bash scripts/gpu-check OUT [STEP ...]             # on the GPU machine: wheels from .whl/ first
    python scripts/gpu_check.py --out /tmp/gc --device cpu --quick env tests plain-loop
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import shlex
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from accel import devices  # noqa: E402

STEPS = ["env", "peaks", "tests", "plain-loop", "ablate", "transformer", "lm", "profile", "jpeg"]
# run only when named: the standing GPU issue's figures
EXTRA = [
    "lm-levers",
    "lm-scale",
    "lm-shape",
    "lm-width",
    "lm-muon",
    "lm-tune",
    "lm-time",
    "resnet-host",
    "resnet-sync",
    "own-loop",
    "own-bench",
    "hf-script",
    "hf-compile",
]
HALVES = {
    "ablate-remove": "all,-amp,-channels_last,-compile,-cudnn,-optim",
    "ablate-add": "+amp,+channels_last,+compile,+cudnn,+optim",
    "preset": "all,-compile",
}
TAIL = 8000  # characters of each command's output kept in the JSON
RESNET_RECIPE = "cifar10-resnet18-cuda"
LM_RECIPE = "lm-bytes-cuda"
LM_HALVES = {
    "lm-remove": ["--ablate", "--only", "all,-amp,-attention,-compile,-cudnn,-optim"],
    "lm-add": ["--ablate", "--only", "+amp,+attention,+compile,+cudnn,+optim"],
}
LM_VARY = {
    "regional": "speedups.compile.regional=false,true",
    "float8": "speedups.float8.enabled=false,true",
    "checkpointing": "speedups.activation_checkpointing.enabled=false,true",
}
LM_LEVERS = {  # the speedrun levers, each against the recipe as given
    "compiled-optimizer": "speedups.compiled_optimizer.enabled=false,true",
    # a captured step cannot be compiled as well (the conflict rule): against the recipe without compile
    "cuda-graphs": "speedups.cuda_graphs.enabled=false,true --set speedups.compile.enabled=false",
    "fused-loss": "task.fused_loss=false,true",
}
LM_SCALE = {  # the larger batch, then max-autotune on top of it (both levers together against the larger batch)
    "batch": "data.batch_size=16,32",
    "max-autotune": "speedups.compile.mode=default,max-autotune --set data.batch_size=32",
}
LM_SHAPE = {  # at batch 32 (45.0% MFU on the H200): larger heads for the attention kernel, larger matmuls
    "heads": "model.args.heads=16,8 --set data.batch_size=32",
    "width": "model.args.width=1024,2048 --set data.batch_size=32",
}
LM_WIDTH = {"width": LM_SHAPE["width"]}  # the heads ran on the H100 of 2026-11-27 (under 2%); the width did not
RESNET_HOST = {  # what keeps the compiled ResNet preset waiting on its host
    "release-workers": "speedups.compile.release_workers=false,true",
    # SGD cannot read a schedule inside a captured step (the conflict rule): both without the schedule
    "cuda-graphs": "speedups.cuda_graphs.enabled=false,true --set speedups.compile.enabled=false "
    "--set schedule.name=none",
}
RESNET_SYNC = {f"sync-{mode}": f"speedups.compile.enabled=false,true --sync {mode}" for mode in ("step", "window")}
RESNET_FULL = ["--steps", "150", "--warmup", "20", "--trials", "3"]
RESNET_QUICK = [
    *("--steps", "2", "--warmup", "1", "--trials", "1"),
    *("--set", "data.batch_size=16", "--set", "model.name=small_cnn", "--set", "data.dataset.num_samples=64"),
]
LM_QUICK = [
    "--set",
    "model.args.width=64",
    "--set",
    "model.args.depth=2",
    "--set",
    "model.args.heads=2",
    "--set",
    "data.dataset.context=64",
    "--set",
    "data.batch_size=4",
]
DATASHEET_DENSE_TFLOPS = {  # vendor figures without sparsity, for comparison with the measured rates
    "H100 80GB HBM3": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
}


class Check:
    def __init__(self, args: argparse.Namespace):
        self.args, self.out, self.work = args, args.out, args.out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.path = self.out / "gpu-check.json"
        self.results: dict = self.load(self.path) or {
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "quick": args.quick,
            "steps": {},
        }

    def sh(self, step: str, command: list[str], timeout: float = 600) -> dict:
        """Run `command` from the repository root; record it under `step` and return the record."""
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            rc, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:
            rc, output = "timeout", f"{err.stdout or ''}{err.stderr or ''}"
        record = {
            "command": shlex.join(command),
            "rc": rc,
            "seconds": round(time.perf_counter() - start, 1),
            "output_tail": output[-TAIL:] if isinstance(output, str) else str(output)[-TAIL:],
        }
        (self.work / f"{step}.log").open("a").write(f"$ {record['command']}\n{output}\n")
        self.results["steps"].setdefault(step, {}).setdefault("commands", []).append(record)
        print(
            f"[{step}] rc={rc} {record['seconds']} s: {record['command']}\n{record['output_tail'][-1500:]}", flush=True
        )
        self.save()  # after every command: a call cut by its time limit keeps what had finished
        return record

    def save(self) -> None:
        self.results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        self.path.write_text(json.dumps(self.results, indent=1, default=str))

    def put(self, step: str, **values) -> None:
        self.results["steps"].setdefault(step, {}).update(values)

    def load(self, path: Path) -> dict | None:
        return json.loads(path.read_text()) if path.is_file() else None


# ---- steps ------------------------------------------------------------------------------------------------
def step_env(check: Check) -> None:
    device = devices.resolve_device(check.args.device)
    smi = (
        check.sh(
            "env",
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
        )
        if device.type == "cuda"
        else None
    )
    info = devices.environment(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {
            "capability": list(torch.cuda.get_device_capability(device)),
            "multiprocessors": props.multi_processor_count,
            "memory_gb": round(props.total_memory / 1e9, 1),
            "nvidia_smi": smi["output_tail"].strip() if smi else None,
        }
    check.put("env", result=info)


def step_peaks(check: Check) -> None:
    path = check.work / "peaks.json"
    size = ["--size", "512", "--repeats", "3"] if check.args.quick else []
    check.sh(
        "peaks", [sys.executable, "benchmarks/peak_rates.py", "--device", check.args.device, "--json", str(path), *size]
    )
    peaks = check.load(path)
    name = (peaks or {}).get("env", {}).get("gpus", [""])[0] if peaks else ""
    sheet = next((rates for model, rates in DATASHEET_DENSE_TFLOPS.items() if model in name), None)
    check.put("peaks", result=peaks, datasheet_dense_tflops=sheet)


def step_tests(check: Check) -> None:
    xml = check.work / "cuda-tests.xml"
    check.sh(
        "tests",
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "cuda",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            *(["-n", "4"] if importlib.util.find_spec("xdist") else []),  # correctness only: 4 at once
            f"--junitxml={xml}",
            "tests",
        ],
        timeout=900,
    )
    check.put("tests", outcomes=junit_outcomes(xml))


def junit_outcomes(xml: Path) -> dict[str, str]:
    """test id -> passed / failed: first line / skipped: reason, from a JUnit XML report."""
    if not xml.is_file():
        return {}
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = f"{'failed' if kind != 'skipped' else kind}: {(found.get('message') or '')[:300]}"
        outcomes[name] = outcome
    return outcomes


def step_plain_loop(check: Check) -> None:
    path = check.work / "plain-loop.json"
    size = (
        ["--model", "small_cnn", "--shape", "1", "16", "16", "--batch-size", "16", "--steps", "3", "--rounds", "2"]
        if check.args.quick
        else ["--model", "resnet18_cifar", "--batch-size", "512", "--steps", "30", "--rounds", "10"]
    )
    check.sh(
        "plain-loop",
        [sys.executable, "benchmarks/compare_plain_loop.py", "--device", check.args.device, "--json", str(path), *size],
    )
    check.put("plain-loop", result=check.load(path))


def step_ablate(check: Check, step: str = "ablate") -> None:
    out = check.work / f"bench-{step}"
    size = RESNET_QUICK if check.args.quick else RESNET_FULL
    only = ["--only", HALVES[step]] if step in HALVES else []
    check.sh(
        step,
        [
            sys.executable,
            "-m",
            "accel.cli",
            "bench",
            RESNET_RECIPE,
            "--ablate",
            "--warm-cache",
            "--set",
            f"device={check.args.device}",
            "--out",
            str(out),
            *size,
            *only,
        ],
        timeout=3000,
    )
    report = check.load(out / "report.json")
    flops = step_flops(RESNET_RECIPE, check.args.device, quick=check.args.quick)
    check.put(step, report=report, flops_per_step=flops, mfu=mfu_table(report, flops, check))


def step_flops(recipe_path: str, device_spec: str, quick: bool) -> dict:
    """FLOPs of one training step (forward + backward) at the recipe's batch size, counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    from accel.config.recipe import load_recipe
    from accel.models import build_model

    recipe = load_recipe(recipe_path, ["model.name=small_cnn"] if quick else [])
    device = devices.resolve_device(device_spec)
    shape = recipe.data.dataset.shape
    model = build_model(recipe.model, num_classes=recipe.data.dataset.num_classes, in_channels=shape[0]).to(device)
    batch = 2  # FLOPs are linear in the batch: count a small one, scale up
    inputs = torch.randn(batch, *shape, device=device)
    counter = FlopCounterMode(display=False)
    with counter:
        model(inputs).sum().backward()
    per_sample = counter.get_total_flops() / batch
    return {
        "per_sample": per_sample,
        "per_step": per_sample * recipe.data.batch_size,
        "batch_size": recipe.data.batch_size,
        "model": recipe.model.name,
    }


def mfu_table(report: dict | None, flops: dict, check: Check) -> list[dict]:
    """Achieved TFLOP/s of each variant and its share of the measured and datasheet peaks of its precision.

    Without amp the precision is TF32, not fp32: PyTorch lets cuDNN run float32 convolutions on TF32 tensor
    cores by default (torch.backends.cudnn.allow_tf32), and nearly all of a ResNet's FLOPs are convolutions.
    """
    if not report:
        return []
    peaks = (check.results["steps"].get("peaks", {}).get("result") or {}).get("matmul_tflops", {})
    sheet = check.results["steps"].get("peaks", {}).get("datasheet_dense_tflops") or {}
    rows = []
    for variant in report["variants"]:
        rate = (variant.get("samples_per_s") or {}).get("median")
        if not rate:
            continue
        achieved = rate * flops["per_sample"] / 1e12
        name = variant["name"]
        precision = "bf16" if _active(name, "amp") else "tf32"
        rows.append(
            {
                "variant": name,
                "tflops": round(achieved, 2),
                "precision": precision,
                "mfu_measured_peak": achieved / peaks[precision] if peaks.get(precision) else None,
                "mfu_datasheet": achieved / sheet[precision] if sheet.get(precision) else None,
            }
        )
    return rows


def _active(variant: str, speedup: str) -> bool:
    """Whether ablation variant `variant` (baseline, all, +NAME, -NAME) has `speedup` on."""
    if variant in ("baseline", "all"):
        return variant == "all"
    return (variant[1:] == speedup) == (variant[0] == "+")


def step_transformer(check: Check) -> None:
    path = check.work / "transformer.json"
    peak = ((check.results["steps"].get("peaks", {}).get("result") or {}).get("matmul_tflops") or {}).get("bf16")
    size = (
        [
            "--layers",
            "2",
            "--width",
            "64",
            "--heads",
            "2",
            "--context",
            "64",
            "--batch",
            "4",
            "--vocab",
            "256",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--variants",
            "fp32,bf16",
        ]
        if check.args.quick
        else []
    )
    check.sh(
        "transformer",
        [
            sys.executable,
            "benchmarks/transformer_probe.py",
            "--device",
            check.args.device,
            "--json",
            str(path),
            *(["--peak-tflops", str(peak)] if peak else []),
            *size,
        ],
    )
    check.put("transformer", result=check.load(path))


def step_lm(check: Check, step: str = "lm") -> None:
    """accel bench of the GPU language-model recipe; `lm` runs all three parts, each its own bench folder."""
    parts = {"lm": ["lm-remove", "lm-add", "lm-vary"]}.get(step, [step])
    size = _lm_size(check, ["--steps", "60", "--warmup", "10", "--trials", "2"])
    runs = [(part, LM_HALVES[part]) for part in parts if part in LM_HALVES]
    if "lm-vary" in parts:
        runs += [(f"lm-{name}", ["--vary", vary]) for name, vary in LM_VARY.items()]
    for name, how in runs:
        _bench(check, step, name, LM_RECIPE, [*how, *size])


def _bench_vary(check: Check, step: str, recipe: str, varies: dict[str, str], size: list[str]) -> None:
    """One `accel bench --vary` per entry, each its own bench folder and JSON key."""
    for name, vary in varies.items():
        _bench(check, step, f"{step}-{name}", recipe, ["--vary", *vary.split(), *size], key=name)


def _bench(check: Check, step: str, name: str, recipe: str, how: list[str], key: str | None = None) -> None:
    """`accel bench RECIPE *how` into the bench folder `bench-NAME`, its report under the step's `key` (NAME)."""
    out = check.work / f"bench-{name}"
    command = [sys.executable, "-m", "accel.cli", "bench", recipe, *how, "--warm-cache", "--out", str(out)]
    check.sh(step, command, timeout=3000)
    check.put(step, **{key or name: check.load(out / "report.json")})
    check.save()  # a call cut by its time limit keeps the benches before


def _lm_size(check: Check, full: list[str]) -> list[str]:
    quick = ["--steps", "2", "--warmup", "1", "--trials", "1", "--set", f"device={check.args.device}", *LM_QUICK]
    return quick if check.args.quick else full


def step_lm_levers(check: Check, step: str = "lm-levers") -> None:
    """Issue 31's speedrun levers on lm-bytes-cuda (`lm-scale`: the larger batch and max-autotune; `lm-shape`: the
    heads and the width), each against the recipe as given; MFU is in each report."""
    varies = {"lm-levers": LM_LEVERS, "lm-scale": LM_SCALE, "lm-shape": LM_SHAPE, "lm-width": LM_WIDTH}[step]
    _bench_vary(check, step, LM_RECIPE, varies, _lm_size(check, ["--steps", "60", "--warmup", "10", "--trials", "2"]))


def step_lm_tune(check: Check, step: str = "lm-tune") -> None:
    """What `accel tune` picks for lm-bytes-cuda on this GPU: speed-ups, batch size (`lm-tune`), or optimizer,
    learning rate and batch size by the time to a validation loss (`lm-time`). 8 minutes, within one call's 10."""
    work = check.work / step
    objective = ["--objective", "time"] if step == "lm-time" else []
    budget = ["--budget", "2m" if check.args.quick else "8m"]
    command = [sys.executable, "-m", "accel.cli", "tune", LM_RECIPE, *objective, *budget, "--work", str(work)]
    check.sh(step, [*command, *_lm_size(check, ["--warm-cache"])], timeout=3000)
    check.put(step, result=check.load(work / "tune.json"))


def step_lm_muon(check: Check) -> None:
    """Time to a validation loss on the GPU, AdamW against Muon, from each trial's process start."""
    size = _lm_size(check, ["--steps", "400", "--warmup", "1", "--trials", "2", "--eval-every", "25"])
    target = ["--target", "val_loss=1.6", "--set", "train.eval_max_batches=8"]
    _bench_vary(check, "lm-muon", LM_RECIPE, {"optimizer": "optim.name=adamw,muon"}, [*size, *target])


def step_resnet(check: Check, step: str) -> None:
    """The ResNet preset's host: `resnet-host` its data wait (compile workers released, and CUDA graphs, each on and
    off); `resnet-sync` what the bench's sync after every step hides (the host's fetch of the next batch cannot
    overlap the GPU's work as in a real run): compiled and eager, with `--sync step` and `--sync window`."""
    size = RESNET_QUICK if check.args.quick else RESNET_FULL
    varies = {"resnet-host": RESNET_HOST, "resnet-sync": RESNET_SYNC}[step]
    _bench_vary(check, step, RESNET_RECIPE, varies, [*size, "--set", f"device={check.args.device}"])


def step_profile(check: Check) -> None:
    size = (
        [
            "--set",
            "model.name=small_cnn",
            "--set",
            "data.batch_size=16",
            "--set",
            "data.dataset.num_samples=64",
            "--warmup",
            "1",
            "--steps",
            "1",
        ]
        if check.args.quick
        else ["--warmup", "30", "--steps", "5"]
    )
    for name, how in (("compiled", []), ("eager", ["--set", "speedups.compile.enabled=false"])):
        check.sh(
            "profile",
            [
                sys.executable,
                "-m",
                "accel.cli",
                "profile",
                RESNET_RECIPE,
                "--out",
                str(check.work / f"profile-{name}"),
                "--set",
                f"device={check.args.device}",
                *how,
                *size,
                "--rows",
                "25",
                *(["--sync-debug"] if check.args.device.startswith("cuda") else []),
            ],
        )


def step_own_loop(check: Check) -> None:
    """A user's own loop on the GPU, plain against accel.Engine: the engine's cost a step, paired in one process over
    one model (each step synchronised, as the loop's `loss.item()` does), then in fresh processes, interleaved."""
    quick = check.args.quick
    cost = check.work / "engine-step-cost.json"
    pairs = ["--scale", "0.01"] if quick else ["--scale", "1"]
    command = [sys.executable, "benchmarks/engine_step_cost.py", "--device", check.args.device, *pairs]
    check.sh("own-loop", [*command, "--models", "gpt-tiny", "gpt", "--out", str(cost)])
    check.put("own-loop", step_cost=check.load(cost))
    path = check.work / "engine-overhead.json"
    full = ["--rounds", "6", "--set", "steps=600", "--loops", "gpt"]
    sizes = ["--rounds", "1", "--set", "steps=3", "--loops", "gpt"] if quick else full
    check.sh(
        "own-loop",
        [sys.executable, "benchmarks/engine_overhead.py", "--device", check.args.device, "--out", str(path), *sizes],
    )
    check.put("own-loop", overhead=check.load(path))


def step_own_bench(check: Check) -> None:
    """`accel bench --ablate` of the examples' GPT loop with `--bf16` on this device: the script bench's A/B report
    (about 6 minutes on the H100 of 2026-11-28)."""
    quick = check.args.quick
    out = check.work / "bench-own-gpt"
    size = ["--steps", "2", "--warmup", "1", "--trials", "1"] if quick else ["--steps", "60", "--warmup", "20"]
    script = [sys.executable, "examples/gpt_loop.py", "--device", check.args.device, "--bf16", "--eval-every", "100000"]
    command = [sys.executable, "-m", "accel.cli", "bench", "--ablate", *size, "--out", str(out), "--", *script]
    check.sh("own-bench", command)
    check.put("own-bench", bench=check.load(out / "report.json"))


HF_FLAGS = "baseline,--bf16=True,--tf32=True,--torch_compile=True"
HF_SHAPE = ["--n_layer", "6", "--n_embd", "768", "--n_head", "12", "--context", "256"]


def step_hf_script(check: Check, step: str = "hf-script") -> None:
    """`accel bench` of the unchanged HF Trainer example on this device: `hf-script` which of its flags help
    (--ablate), `hf-compile` its --torch_compile with --tf32 True and False (the compiled fp32 step's rate)."""
    quick = check.args.quick
    out = check.work / f"bench-{step}"
    size = (
        ["--steps", "2", "--warmup", "1", "--trials", "1"]
        if quick
        else ["--steps", "40", "--warmup", "10", "--trials", "2"]
    )
    shape = ["--n_layer", "1", "--n_embd", "32", "--context", "16"] if quick else HF_SHAPE
    script = [sys.executable, "examples/hf_trainer.py", "--output_dir", str(check.work / "hf-out")]
    script += ["--report_to", "none", "--per_device_train_batch_size", "32", *shape]
    if step == "hf-compile":
        how, script = ["--vary", "arg:--tf32=True,False"], [*script, "--torch_compile", "True"]
    else:
        how = ["--ablate", "--only", HF_FLAGS]
    command = [sys.executable, "-m", "accel.cli", "bench", *how, *size, "--out", str(out)]
    check.sh(step, [*command, "--", *script], timeout=3000)
    check.put(step, bench=check.load(out / "report.json"))


def step_jpeg(check: Check) -> None:
    folder, out = check.work / "jpeg-folder", check.work / "bench-data"
    per_class = ["--per-class", "20"] if check.args.quick else []
    check.sh("jpeg", [sys.executable, "scripts/make_jpeg_folder.py", str(folder), *per_class])
    rounds = ["--batches", "3", "--rounds", "1"] if check.args.quick else ["--batches", "40", "--rounds", "5"]
    check.sh(
        "jpeg",
        [
            sys.executable,
            "-m",
            "accel.cli",
            "bench-data",
            "imagefolder-jpeg",
            "--set",
            f"data.dataset.root={folder}",
            "--cache-dir",
            str(check.work / "cache"),
            "--device",
            check.args.device,
            "--out",
            str(out),
            *rounds,
        ],
    )
    check.put("jpeg", result=check.load(out / "bench-data.json"))


RUNNERS = {
    "env": step_env,
    "peaks": step_peaks,
    "tests": step_tests,
    "plain-loop": step_plain_loop,
    "ablate": step_ablate,
    "transformer": step_transformer,
    "lm": step_lm,
    "profile": step_profile,
    "jpeg": step_jpeg,
    **{half: lambda check, half=half: step_ablate(check, half) for half in HALVES},
    **{part: lambda check, part=part: step_lm(check, part) for part in [*LM_HALVES, "lm-vary"]},
    "lm-levers": step_lm_levers,
    "lm-scale": lambda check: step_lm_levers(check, "lm-scale"),
    "lm-shape": lambda check: step_lm_levers(check, "lm-shape"),
    "lm-width": lambda check: step_lm_levers(check, "lm-width"),
    "lm-tune": step_lm_tune,
    "lm-time": lambda check: step_lm_tune(check, "lm-time"),
    "lm-muon": step_lm_muon,
    "resnet-host": lambda check: step_resnet(check, "resnet-host"),
    "resnet-sync": lambda check: step_resnet(check, "resnet-sync"),
    "own-loop": step_own_loop,
    "own-bench": step_own_bench,
    "hf-script": step_hf_script,
    "hf-compile": lambda check: step_hf_script(check, "hf-compile"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parts = list(HALVES) + list(LM_HALVES) + ["lm-vary"] + EXTRA
    parser.add_argument("steps", nargs="*", choices=STEPS + parts + [[]], default=[], metavar="STEP")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the script, not the GPU")
    args = parser.parse_args(argv)
    check = Check(args)
    for step in args.steps or STEPS:
        started = time.perf_counter()
        try:
            RUNNERS[step](check)
        except Exception as err:  # one broken step must not lose the others' results
            check.put(step, error=f"{type(err).__name__}: {err}")
            print(f"[{step}] error: {err}", flush=True)
        check.put(step, seconds=round(time.perf_counter() - started, 1))
        check.save()
    with tarfile.open(args.out / "raw.tar.gz", "w:gz") as tar:
        tar.add(
            check.work,
            arcname="raw",
            filter=lambda info: (
                None
                if info.name.endswith((".pt", ".jpg")) or "/cache" in info.name or "jpeg-folder" in info.name
                else info
            ),
        )
    print(f"wrote {check.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
