"""Speed traps, each defined and worded once: a pure function of plain facts gives `Finding`s with a stable code.

`accel.measure.lint` reads the facts from a set-up trainer (and, at the end, the run's summary); `accel doctor` reads
them from the machine and a recipe. `train.lint_ignore` names codes from `codes()`, and both leave those out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models.blocks import TRAITS
from ..registry import SPEEDUPS

DATA_WAIT = 0.10  # above this share of step time waiting for batches, the loader is what to speed up
NAMED = 3  # float64 tensors named in a finding; the rest are counted
MANY_CORES = 8  # above this, an unset OMP_NUM_THREADS makes every process start a thread per core
BF16_CODE = "fp32-with-fast-bf16"  # its measurement is skipped where a run ignores it
BF16_PAYS = 1.1  # bf16 matmuls at the model's size measured at least this much faster than fp32's: else no trap
# a script's framework, as the instrument names it (`script` in the facts: "hf", "lightning" or "plain")
FRAMEWORK_NAMES = {"hf": "the Hugging Face Trainer's", "lightning": "Lightning's"}
RUN_CODES = (
    "anomaly-detection",
    "deterministic",
    "pin-memory-off",
    "optimizer-not-fused",
    BF16_CODE,
    "threads-over-cores",
    "processes-over-cores",
    "workers-compete",
    "data-wait",
    "recompiles",
    "float64-model",
    "float64-batch",
    "host-sync",
)
MACHINE_CODES = (
    "omp-threads-unset",
    "pin-memory-without-cuda",
    "deterministic-with-benchmark",
    "cuda-build-without-gpu",
)  # found by `accel doctor` only: a running trainer has no need of them
CODES = RUN_CODES + MACHINE_CODES


def needless_code(speedup: str, trait: str) -> str:
    """The code of a speed-up on a model without the trait it needs: `channels-last-without-conv`."""
    return f"{speedup.replace('_', '-')}-without-{TRAITS[trait][1]}"


def codes() -> tuple[str, ...]:
    """Every code: the fixed ones, one per registered speed-up that declares the model trait it needs and the
    finding each speed-up declares it gives whenever it runs (`lint_finding`)."""
    classes = [SPEEDUPS.get(name) for name in SPEEDUPS.names()]
    needless = tuple(needless_code(cls.name, cls.needs) for cls in classes if cls.needs)
    return CODES + needless + tuple(cls.lint_finding.code for cls in classes if cls.lint_finding)


@dataclass(frozen=True)
class Finding:
    """One speed trap: a stable `code`, what was found, and the change that removes it."""

    code: str
    found: str
    fix: str

    def __str__(self) -> str:
        return f"{self.found} Fix: {self.fix}"


def _fix(f: dict[str, Any], recipe: str, script: str, frameworks: dict[str, str] | None = None) -> str:
    """A fix in the terms the training was set up in: a recipe's keys (an engine's too), or a script's own code,
    where it is an HF Trainer's or a Lightning script, with that framework's own setting (`{own}` in `script`):
    never another framework's."""
    if not f.get("script"):
        return recipe
    own = (frameworks or {}).get(f["script"])
    return script.replace("{own}", f" ({FRAMEWORK_NAMES[f['script']]} {own})" if own else "")


def findings(facts: dict[str, Any], summary: dict[str, Any] | None = None) -> list[Finding]:
    """The traps `facts` show; with a run's `summary`, also those only the run itself reveals."""
    out = _process_traps(facts) + _device_traps(facts) + _thread_traps(facts) + _float64_model(facts)
    if summary is not None:
        out += _run_traps(facts, summary)
    return out


def _process_traps(f: dict[str, Any]) -> list[Finding]:
    out = []
    if f["anomaly_detection"]:
        out.append(
            Finding(
                "anomaly-detection",
                "autograd anomaly detection is on: every op records its stack and "
                "backward checks every result for NaN, several times slower.",
                "torch.autograd.set_detect_anomaly(False) once the NaN is found.",
            )
        )
    if f["deterministic"]:
        out.append(
            Finding(
                "deterministic",
                "deterministic algorithms are on: torch picks slower kernels (and cudnn.benchmark cannot search).",
                "torch.use_deterministic_algorithms(False) unless bit-exact reruns are the point.",
            )
        )
    out += f.get("speedup_findings", [])  # each running speed-up's own (`Speedup.lint_finding`)
    for name, trait in f["needless"].items():
        out.append(
            Finding(
                needless_code(name, trait),
                f"speed-up {name} is on, but the model has no {TRAITS[trait][0]}: it only adds work.",
                f"remove `speedups.{name}`.",
            )
        )
    return out


def _device_traps(f: dict[str, Any]) -> list[Finding]:
    out = []
    if f["device"] == "cuda" and f["pin_memory"] is False:
        out.append(
            Finding(
                "pin-memory-off",
                "pin_memory is off with a CUDA device: each batch is copied twice and the copy cannot overlap compute.",
                _fix(
                    f,
                    "data.loader.pin_memory: auto",
                    "DataLoader(..., pin_memory=True){own}.",
                    {"hf": "--dataloader_pin_memory True"},
                ),
            )
        )
    if f["device"] == "cuda" and f["fused_exists"] and not f["fused"]:
        out.append(
            Finding(
                "optimizer-not-fused",
                f"{f['optimizer']} runs its unfused implementation on CUDA: "
                "several kernels per parameter group instead of one.",
                _fix(
                    f,
                    "speedups: {optim: {impl: fused}}",
                    f"{f['optimizer']}(..., fused=True){{own}}.",
                    {"hf": "--optim adamw_torch_fused"},
                ),
            )
        )
    measured = f.get("bf16_matmul_speedup")  # None: not measured
    if f["fast_bf16"] and not f["amp"] and (measured is None or measured >= BF16_PAYS):
        where = "this GPU" if f["device"] == "cuda" else "this CPU (AMX)"
        speed = (
            "which computes bf16 matmuls natively (their speed here not measured)"
            if measured is None
            else f"where bf16 matmuls at the model's largest layer measured {measured:.1f}x fp32's speed"
        )
        out.append(
            Finding(
                BF16_CODE,
                f"training in fp32 on {where}, {speed}.",
                _fix(
                    f,
                    "speedups: {amp: {dtype: bf16}} (check accuracy with `accel bench`).",
                    "torch.autocast(device_type, dtype=torch.bfloat16) around the forward and the loss{own}; check "
                    "accuracy with `accel bench`.",
                    {"hf": "--bf16", "lightning": "precision='bf16-mixed'"},
                ),
            )
        )
    return out


def _thread_traps(f: dict[str, Any]) -> list[Finding]:
    out, cores = [], f["cores"]
    threads = max(f["torch_threads"], f.get("blas_threads", 0))  # the pools: `accel doctor` reads them
    if threads > cores:
        out.append(
            Finding(
                "threads-over-cores",
                f"{threads} BLAS/OpenMP threads on {cores} usable cores: threads "
                "wait for each other and every op runs at the slowest one's pace.",
                _fix(
                    f,
                    f"OMP_NUM_THREADS={cores}, or `speedups: {{threads: {{}}}}` (caps at the cores).",
                    f"OMP_NUM_THREADS={cores}, or torch.set_num_threads({cores}).",
                ),
            )
        )
    processes = f.get("processes", 1)
    if f["device"] == "cpu" and processes > cores:
        out.append(
            Finding(
                "processes-over-cores",
                f"{processes} training processes on {cores} usable cores: each "
                "CPU process needs a core of its own at least, so they take turns and every step waits "
                "for the slowest.",
                f"{_fix(f, '--nproc', 'torchrun --nproc_per_node')} {cores} or fewer (on a CPU, fewer processes "
                "with more threads each are usually faster).",
            )
        )
    workers = f["workers"] or 0
    # accel's workers run one thread each (worker_init); on a CPU the step computes with the torch threads too
    compute = f["torch_threads"] if f["device"] == "cpu" else 0
    if workers and workers + compute > cores:
        main = f" + {compute} compute threads" if compute else ""
        out.append(
            Finding(
                "workers-compete",
                f"{workers} loader worker(s){main} on {cores} cores: the workers take cores from the training step.",
                _fix(
                    f,
                    "data.loader.num_workers: 0 for in-memory data, else fewer compute threads "
                    "(speedups.threads.intra_op); `accel tune` measures both.",
                    "DataLoader(num_workers=0) for in-memory data, else fewer compute threads "
                    "(torch.set_num_threads); `accel bench --vary` measures both.",
                ),
            )
        )
    if f.get("omp_unset") and cores > MANY_CORES:
        out.append(
            Finding(
                "omp-threads-unset",
                f"OMP_NUM_THREADS is unset on a {cores}-core machine: every process "
                "(each DDP rank, any worker pool not started by accel) starts a thread per core.",
                "OMP_NUM_THREADS set to the cores per process.",
            )
        )
    return out


FLOAT64 = "float64 runs at half of float32's speed on CPUs and at 1/2 to 1/64 of it on GPUs."


def _float64_model(f: dict[str, Any]) -> list[Finding]:
    names = f.get("float64_model") or []
    if not names:
        return []
    return [
        Finding(
            "float64-model",
            f"{len(names)} float64 parameter(s)/buffer(s) ({_some(names)}): {FLOAT64}",
            "model.float() before training (or build it with float32 data: np.float32, torch.float32).",
        )
    ]


def _step_traps(f: dict[str, Any]) -> list[Finding]:
    """What the lint saw in the steps themselves (accel.measure.lint.SpeedLint.watch)."""
    out, shapes, syncs = [], f.get("float64_batch") or [], f.get("syncs") or {}
    if shapes:
        out.append(
            Finding(
                "float64-batch",
                f"the batch holds {len(shapes)} float64 tensor(s) (shapes {_some(shapes)}): {FLOAT64} "
                "Whatever they touch (the loss, a cast) computes in float64 too.",
                "float32 where the data is made (np.float32, torch.from_numpy(x).float(), dtype=torch.float32).",
            )
        )
    if syncs:
        lines = ", ".join(f"{where} ({n}x)" for where, n in sorted(syncs.items(), key=lambda kv: -kv[1]))
        out.append(
            Finding(
                "host-sync",
                f"a training step made the CPU wait for the GPU {sum(syncs.values())} time(s), at {lines}: "
                "the CPU stops queueing work until the GPU catches up.",
                "keep per-step values on the device (no .item(), .cpu(), .tolist(), print(tensor), if tensor: or "
                "boolean-mask indexing in the step); read them every N steps, e.g. when logging.",
            )
        )
    return out


def _some(names: list[str]) -> str:
    more = f", and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return ", ".join(names[:NAMED]) + more


def _run_traps(f: dict[str, Any], summary: dict[str, Any]) -> list[Finding]:
    out = _step_traps(f)
    wait, workers = summary.get("data_wait_fraction"), f["workers"] or 0
    # In-memory tensors are gathered in one index per batch: workers would only add copies.
    if wait is not None and wait > DATA_WAIT and workers < f["cores"] and not f["in_memory"]:
        out.append(
            Finding(
                "data-wait",
                f"{wait:.0%} of step time waited for batches with {workers} loader worker(s).",
                _fix(
                    f,
                    "more data.loader.num_workers (workers_kind: threads where decoding releases the GIL), "
                    "data.cache for decoded images, or augmentation on the device (`accel tune` measures workers).",
                    "more DataLoader num_workers (with persistent_workers=True), decoded images cached, or "
                    "augmentation on the device (`accel bench --vary` measures the workers).",
                ),
            )
        )
    # whichever speed-up reports recompilations (torch.compile's)
    recompiles = max((m.get("recompiles") or 0 for m in (summary.get("speedup_metrics") or {}).values()), default=0)
    epochs = summary.get("epochs") or 0
    if epochs >= 2 and recompiles >= epochs:
        out.append(
            Finding(
                "recompiles",
                f"torch.compile recompiled {recompiles} times in {epochs} "
                "epochs: a shape or value changes every epoch (often the last, smaller batch).",
                "data.drop_last: true, or `speedups.compile.dynamic: true`.",
            )
        )
    return out


def machine_findings(f: dict[str, Any]) -> list[Finding]:
    """The traps `accel doctor` finds in a machine's (and a recipe's) facts."""
    out = _thread_traps(f)
    if f.get("pin_memory") is True and not f["cuda_available"]:
        out.append(
            Finding(
                "pin-memory-without-cuda",
                "data.loader.pin_memory is true but there is no CUDA device: "
                "pinning costs a copy and buys nothing here (torch only warns).",
                "data.loader.pin_memory: auto",
            )
        )
    if f["deterministic"] and f["benchmark"]:
        out.append(
            Finding(
                "deterministic-with-benchmark",
                "deterministic mode and cudnn.benchmark are both on: "
                "benchmark's algorithm search is non-deterministic, so one of the two settings is not "
                "doing what you expect.",
                "pick one.",
            )
        )
    if f["cuda_build"] and not f["cuda_available"]:
        out.append(
            Finding(
                "cuda-build-without-gpu",
                f"torch is a CUDA {f['cuda_build']} build but no CUDA device "
                "or driver is usable: everything runs on the CPU.",
                "check `nvidia-smi`, or install the smaller CPU wheel.",
            )
        )
    return out
