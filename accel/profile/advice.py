"""Advice that names the fix: each rule is one finding (a test over the profile's figures), the speed-up or setting
that addresses it, and the `accel bench` command that would prove it on this recipe (or script). One rule per
finding; add a rule here and a case to tests/profiling/test_advice.py, nothing else."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measure.traps import DATA_WAIT, FRAMEWORK_NAMES
from .measured import Measured, bench_measured, benches_of
from .phases import share

# worth a bench of mixed precision where the step is estimated this much faster: its matmul share sped up by bf16's
# measured rate at the model's size (2x where not measured), the rest unchanged
BF16_STEP_PAYS = 1.1
BF16_UNMEASURED = 2.0


@dataclass(frozen=True)
class Facts:
    """The figures the rules weigh, read from a profile report (profile.json's keys)."""

    data: float  # share of the step waiting for the loader
    optimizer: float  # share in the optimizer step
    matmul: float  # share of op time in matmul/convolution/attention
    gpu_idle: float | None  # CUDA: fraction of the steps' wall time with no kernel running
    kernels_per_step: float | None
    median_kernel_us: float | None
    memory: float  # the window's peak memory over the device's (CUDA) or the machine's (CPU)
    precision: str  # fp32, bf16, fp16
    bf16_fast: bool  # the device computes bf16 natively
    workers: int | None  # the training loader's worker processes (None: not a torch DataLoader)
    cuda: bool
    unchanged: bool  # a script without an engine: the fix is in its own terms
    fused_optimizer: bool  # the optimizer steps fused already
    bf16_speedup: float | None  # bf16 matmul over fp32 at the model's largest matmul, measured (None: not)

    @classmethod
    def of(cls, report: dict[str, Any]) -> Facts:
        facts, gpu, table = report["facts"], report.get("gpu") or {}, report["anatomy"]
        peak = max((row["peak_mb"] or 0.0 for row in table["phases"]), default=0.0)
        return cls(
            data=share(table, "data"),
            optimizer=share(table, "optimizer"),
            matmul=report["matmul_share"],
            gpu_idle=gpu.get("idle_fraction"),
            kernels_per_step=gpu.get("kernels_per_step"),
            median_kernel_us=gpu.get("median_kernel_us"),
            memory=peak / facts["device_memory_mb"],
            precision=facts["precision"],
            bf16_fast=facts["bf16_fast"],
            workers=facts["num_workers"],
            cuda=report["device"].startswith("cuda"),
            unchanged=facts.get("framework") is not None,
            fused_optimizer=facts.get("fused_optimizer", False),
            bf16_speedup=facts.get("bf16_matmul_speedup"),
        )

    @property
    def bf16_step_estimate(self) -> float:
        """How much faster bf16 would make the step if only its matmuls sped up, at the measured rate. An estimate,
        not a bound: the conversions around the matmuls cost, and bf16 speeds up other ops too (a CPU's
        memory-bound ones read half the bytes), so only a bench measures the step."""
        rate = self.bf16_speedup or BF16_UNMEASURED
        return 1 / (1 - self.matmul + self.matmul / rate)

    def bf16_said(self, bench: Measured | None) -> str:
        """The estimate with what it assumed, or, where a bench of this run measured the step, the bench's figure
        (the estimate withdrawn where the bench's interval leaves it out)."""
        if self.bf16_speedup is None:
            return f" (a bench of this run measured the step at {bench.said})" if bench else ""
        estimate = (
            f"bf16 matmuls at the model's size measured {self.bf16_speedup:.1f}x fp32 here; if only they sped up, "
            f"the step would be {self.bf16_step_estimate:.2f}x faster"
        )
        if bench is None:
            return f" ({estimate}: an estimate; `accel bench` measures the step)"
        if bench.contradicts(self.bf16_step_estimate):
            return (
                f" (the estimate of {self.bf16_step_estimate:.2f}x from its matmuls alone is withdrawn: a bench of "
                f"this run measured the step at {bench.said})"
            )
        return f" ({estimate}; a bench of this run measured the step at {bench.said})"


@dataclass(frozen=True)
class Rule:
    name: str
    applies: Callable[[Facts], bool]
    finding: str  # formatted with the Facts' fields
    fix: str
    bench: str  # the `accel bench` options that measure the fix against the recipe (or script) as it is
    # for a script with an engine where `fix` names a recipe's keys: this, and no bench command
    script_fix: str | None = None
    # for a script without an engine: the fix in torch's terms, and where the script is an HF Trainer's or a
    # LightningCLI's, that framework's own flag for it (a plain script's own switch is found by `switches`)
    unchanged_fix: str = ""
    framework_flags: dict[str, str] = field(default_factory=dict)
    # the meanings of a plain script's own speed switches that are the fix (accel/bench/script_switches.py)
    switches: tuple[str, ...] = ()


RULES = (
    Rule(
        "data-bound",
        lambda f: f.data > DATA_WAIT,  # the speed lint's threshold: one rule for when the loader is too slow
        "{data:.0%} of each step waits for the next batch (loader workers: {workers}): the loader is the bottleneck",
        "more loader workers (data.loader.num_workers), the decoded cache (data.cache.enabled: true) for image "
        "files, or DALI (data.loader.backend: dali) to decode on the GPU",
        "--vary data.loader.num_workers=0,2,4 --vary data.cache.enabled=false,true",
        "more workers for the script's DataLoader (num_workers), batches through eng.setup_dataloaders, or "
        "decoding on the GPU (DALI)",
        "more workers for the DataLoader (num_workers), or decoding on the GPU (DALI)",
        framework_flags={"hf": "--dataloader_num_workers"},
        switches=("loader workers",),
    ),
    Rule(
        "host-bound",
        lambda f: f.cuda and f.gpu_idle is not None and f.gpu_idle >= 0.3,
        "the GPU is idle {gpu_idle:.0%} of the step: the host (Python, kernel launches) cannot keep it busy",
        "compile the model (speedups.compile; its mode: reduce-overhead also replays the step as CUDA graphs), "
        "or capture the step as a CUDA graph without compiling (speedups.cuda_graphs)",
        # compile alone: it and cuda_graphs refuse each other, and every variant of a --vary product must run
        "--vary speedups.compile.enabled=false,true",
        unchanged_fix="torch.compile the model (mode reduce-overhead also replays the step as CUDA graphs)",
        framework_flags={"hf": "--torch_compile"},
        switches=("torch.compile",),
    ),
    Rule(
        "small-kernels",
        lambda f: f.cuda and (f.kernels_per_step or 0) >= 500 and (f.median_kernel_us or 1e9) < 20,
        "{kernels_per_step:.0f} kernels per step with a median of {median_kernel_us:.0f} us: launch overhead "
        "and memory traffic between small kernels",
        "compile the model (speedups.compile) to fuse them",
        "--vary speedups.compile.enabled=false,true",
        unchanged_fix="torch.compile the model to fuse them",
        framework_flags={"hf": "--torch_compile"},
        switches=("torch.compile",),
    ),
    Rule(
        "fp32-matmuls",
        # not where bf16 measured no faster at the model's own matmul size: narrow layers pay for the conversions
        lambda f: f.precision == "fp32" and f.bf16_fast and f.bf16_step_estimate >= BF16_STEP_PAYS,
        "{matmul:.0%} of op time is matmul/convolution in fp32 on a device with fast bf16{bf16_said}",
        "mixed precision (speedups.amp: {{dtype: bf16}})",
        "--vary speedups.amp.enabled=false,true",
        unchanged_fix="bf16 autocast around the forward and loss (torch.autocast(device, torch.bfloat16))",
        framework_flags={"hf": "--bf16", "lightning": "--trainer.precision bf16-mixed"},
        switches=("mixed precision", "bf16 mixed precision"),
    ),
    Rule(
        "memory-bound",
        lambda f: f.memory >= 0.8,
        "the step's peak memory is {memory:.0%} of the device's: no room for a larger batch, and close to running out",
        "activation checkpointing (speedups.activation_checkpointing); for a language model the chunked loss "
        "(task.fused_loss: true) never holds the whole vocabulary's logits",
        "--vary speedups.activation_checkpointing.enabled=false,true",
        unchanged_fix="activation checkpointing (torch.utils.checkpoint)",
        framework_flags={"hf": "--gradient_checkpointing"},
        switches=("gradient checkpointing",),
    ),
    Rule(
        "slow-optimizer",
        # a script's own fused optimizer has nothing of accel's to add (an engine's may still compile its step)
        lambda f: f.optimizer >= 0.15 and not (f.unchanged and f.fused_optimizer),
        "the optimizer step takes {optimizer:.0%} of the step",
        "a fused optimizer (speedups.optim: {{impl: fused}}) or a compiled one (speedups.compiled_optimizer)",
        # not foreach: the compiled optimizer refuses it, and every variant of the product must run
        "--vary speedups.optim.impl=auto,fused --vary speedups.compiled_optimizer.enabled=false,true",
        unchanged_fix="a fused optimizer (fused=True where the script builds its torch.optim optimizer)",
        framework_flags={"hf": "--optim adamw_torch_fused"},
        switches=("a fused or foreach optimizer",),
    ),
)


def advise(
    report: dict[str, Any], recipe: str | list[str], overrides: list[str] = (), folder: Path | None = None
) -> list[dict[str, str]]:
    """The rules that apply to `report`, each as its finding, the fix and the bench command: on the recipe (a
    path) or the script (its command line, a list) with the `--set` overrides the profile was given, since the
    bench must measure the run that was profiled. A rule whose keys only a recipe has gives a script no command; a
    script without an engine gets the fix in its own terms (a plain script's own switch for it, `--amp --amp-dtype
    bfloat16`), and `--ablate` of its flags where it has them (a plain loop without: no command). Where a bench
    beside `folder` (the profile's) already found the advised change no faster on this run, the advice says so
    (`measured`)."""
    script = not isinstance(recipe, str)
    framework = report["facts"].get("framework")
    sets = [f"--set={item}" for item in overrides]
    facts = Facts.of(report)
    # an unchanged script's bench is its --ablate, not the rules' keys: nothing to look up for it
    benches = benches_of(folder, shlex.join(recipe) if script else recipe) if folder and framework is None else []
    advice = []
    for rule in RULES:
        if not rule.applies(facts):
            continue
        if framework is not None:
            switches = report["facts"].get("switches") or {}
            own = [spelled for meaning, spelled in switches.items() if meaning in rule.switches]
            flags = framework in FRAMEWORK_NAMES or own
            fix = rule.unchanged_fix + _in_its_terms(rule, framework, own)
            bench = f"accel bench --ablate -- {shlex.join(recipe)}" if flags else None
        elif script and rule.script_fix is not None:
            fix, bench = rule.script_fix, None
        elif script:
            fix, bench = (
                rule.fix,
                " ".join(["accel bench", *map(shlex.quote, sets), rule.bench, "--", shlex.join(recipe)]),
            )
        else:
            fix, bench = rule.fix, f"accel bench {shlex.join([recipe, *sets])} {rule.bench}"
        measured = bench_measured(benches, rule.bench)
        finding = rule.finding.format(**vars(facts), bf16_said=facts.bf16_said(measured))
        advice.append({"rule": rule.name, "finding": finding, "fix": fix.format(), "bench": bench})
        if measured is not None and measured.refuted:
            advice[-1]["measured"] = (
                f"a bench of this run measured it at {measured.said}: no use trying it again unless the run changed"
            )
    return advice


def _in_its_terms(rule: Rule, framework: str, own: list[str]) -> str:
    """The script's own spelling of the fix: its framework's flag, or a plain script's own switches (timm's `--amp
    --amp-dtype bfloat16`); nothing where it has neither. Never another framework's flag."""
    if framework in rule.framework_flags:
        return f": {FRAMEWORK_NAMES[framework]} {rule.framework_flags[framework]}"
    return f": the script's own {' or '.join(own)}" if own else ""
