"""What the instrument writes, read off its recorder (accel/trial/instrument/recorder.py): the probe's answer and the
trial's record, the same `Trial` a script's engine writes, from the bench's one home for a trial's figures
(accel/bench/trial_figures.py)."""

from __future__ import annotations

import re
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from ... import devices
from ...bench.trial_figures import deltas, diverged, final_loss, ran_out, rates, steady, target_figures, window_short
from ...bench.trial_process import NEVER_STEPPED
from ...measure.flops import ForwardSum
from ...strategy.precision import DTYPES
from . import guard

if TYPE_CHECKING:
    from .recorder import Recorder

# the script's own evaluation, where it logs one (the results-changed flag): HF's and Lightning's usual names,
# else a validation loss by another spelling (TensorBoard's `val/loss`)
EVAL_METRICS = ("eval_loss", "val_loss")
EVAL_LOSS = re.compile(r"(eval|val|valid|validation)[/_. ]?loss")
EVALUATE_WITHIN = (
    "have it evaluate within the trial's steps (an HF Trainer: --eval_strategy steps --eval_steps N), or give the "
    "trials more --steps"
)


def given(rec: Recorder) -> dict[str, Any]:
    """The probe's answer: no engine; the device, the optimizer, the model's traits, what a framework told and the
    script's own argparse parsers, and the libraries a zygote may import for its trials."""
    from ...models.blocks import model_traits
    from .. import preload
    from .parsers import captured
    from .recorder import FACTS

    return {
        "engine": False,
        "resolved_device": str(rec.device),
        "optimizer": type(rec.optimizer).__name__,
        "model_traits": model_traits(rec.models[0]) if rec.models else None,
        "parsers": captured(),
        "preload": preload.preloadable(),
        **FACTS,
    }


def trial(rec: Recorder) -> dict[str, Any]:
    """The figures of `accel.bench.records.Trial`, from the recorder's marks (the first step's counts came before
    the model's hook: the timed steps are measured from the first mark on)."""
    from ...models.blocks import model_traits
    from .parsers import made
    from .recorder import FACTS

    window = rec.load.end()  # first: what follows (the FLOPs counted) is not the timed steps
    steps = deltas(rec.marks[1:], rec.marks[0])
    cut, timed, said = steady(steps[rec.warmup - 1 :])
    figures = rates(timed, data_known=rec.loader_seen)
    flops = _flops_per_sample(rec)
    record = {
        **figures,
        **rec.utilisation.stats(figures["samples_per_s"]),  # FLOP/s and MFU over the timed steps
        "mfu_of": rec.utilisation.peak_dtype,
        "flops_per_step": flops * timed[0]["samples"] if flops and timed else None,
        "build_s": _startup_s(rec),
        "first_step_s": rec.marks[0]["wall"] - rec.zero,
        "warmup_s": rec.marks[rec.warmup - 1 + len(cut)]["wall"] - rec.zero,  # the one-offs cut included
        **said,
        **window_short([s["s"] for s in steps[rec.warmup - 1 :]], rec.window),
        "peak_memory_mb": devices.peak_memory_mb(rec.device),
        "eval_s": rec.eval_s,
        "save_s": rec.save_s,
        "wall_s": time.perf_counter() - rec.zero,
        "model_traits": model_traits(rec.models[0]) if rec.models else None,
        "run_steps": FACTS.get("run_steps"),
        "env": devices.environment(rec.device),
        **_compile_figures(),
        **_batch(timed),
        **_metric_figures(rec),
        "lint": _lint(rec, figures),
        "load": window,
        **made(),
    }
    started = guard.started_by_script()
    if started:  # the bench says it: a process the script started, ended by accel (guard.end)
        record["measured_in"] = started
    if rec.step_losses and all(loss is not None for loss in rec.step_losses):
        losses = torch.stack(rec.step_losses).tolist()  # one device sync, at the end
        planned = losses[rec.warmup : rec.warmup + rec.steps or None]  # as every variant trained them
        record |= {"final_loss": final_loss(planned), "step_losses": losses, **diverged(losses)}
    return record


def _lint(rec: Recorder, figures: dict[str, Any]) -> list[dict[str, str]]:
    """The speed lint's findings in the script's training, each fix in the script's own terms."""
    from ...measure.lint import as_records, script_facts
    from ...measure.traps import findings
    from .recorder import FACTS

    model = rec.models[0] if rec.models else None
    facts = script_facts(
        rec.device, rec.optimizer, model, rec.precision, rec.loader_facts, rec.float64_batch, FACTS["framework"]
    )
    return as_records(findings(facts, {"data_wait_fraction": figures.get("data_wait_fraction")}))


def _startup_s(rec: Recorder) -> float:
    """To the training's start (a framework's), or a plain loop's first backward (its imports, data and model
    before it) less what dynamo compiled by then: that is the report's compile seconds, counted once. The first step
    and warm-up count from the process's start, the only start seen from outside (an engine's and a recipe's count
    from their own start, after the build)."""
    if rec.began is not None:
        return rec.began - rec.zero
    end = rec.first_backward or rec.marks[0]["wall"]
    return end - rec.zero - rec.compiled_before_backward


def _flops_per_sample(rec: Recorder) -> float | None:
    """FLOPs of a sample's forward and backward, counted on the first hooked training forward's inputs (the
    model's output summed for the loss the script computes itself), under the autocast it ran in."""
    if rec.flops_inputs is None:
        return None
    module, inputs = rec.flops_inputs
    precision, device = rec.precision or "fp32", rec.device
    dtype = DTYPES.get(precision)
    autocast = partial(torch.autocast, device.type, dtype=dtype, enabled=dtype is not None)
    rec.utilisation.count_module(module, device, precision, ForwardSum, inputs, autocast)
    return rec.utilisation.flops_per_sample


def ended_early(rec: Recorder) -> str:
    if not rec.marks:
        return NEVER_STEPPED
    return ran_out(len(rec.marks), rec.warmup, rec.steps)


def _batch(timed: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch per micro-batch and the micro-batches per step: the model's training forwards in a step."""
    forwards = timed[0]["forwards"] if timed else 0
    return {"batch_size": timed[0]["samples"] // forwards or None, "grad_accum": forwards} if forwards else {}


def _metric_figures(rec: Recorder) -> dict[str, Any]:
    """The script's own evaluation metric (the results-changed flag reads it) and the time to the target."""
    logged = rec.metrics if rec.planned_metrics is None else rec.planned_metrics
    name = rec.metric or next((m for m in EVAL_METRICS if m in logged), None)
    name = name or next((m for m in logged if EVAL_LOSS.fullmatch(m)), None)
    figures = {"val_metric_name": name, "val_metric": logged[name]} if name in logged else {}
    if rec.metric is None:
        return figures
    from .recorder import FACTS

    fix = _log_it(rec.metric) if FACTS["framework"] == "plain" else EVALUATE_WITHIN
    named = set(rec.metrics)
    return figures | target_figures(rec.target, rec.metric, rec.evals, len(rec.marks), "", fix, named, rec.pruned)


def _log_it(metric: str) -> str:
    """How a plain loop logs `metric`: a line it prints, read through --metric-pattern (a group names a metric that
    is a Python name), or a TensorBoard scalar."""
    pattern = f"give accel bench --metric-pattern '{metric} (?P<{metric}>[0-9.eE+-]+)' matching a line it prints, or "
    return (
        f"{pattern if metric.isidentifier() else ''}have it write SummaryWriter.add_scalar('{metric}', value), "
        "within the trial's steps"
    )


def _compile_figures() -> dict[str, Any]:
    """What torch.compile cost the process (dynamo's own seconds, graph breaks, recompilations), where it ran."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from ...speedups.compile import DynamoStats

    read = DynamoStats.since_start().read()
    if not read["seconds"]:
        return {}
    return {"compile_s": read["seconds"], "graph_breaks": read["graph_breaks"], "recompiles": read["recompiles"]}
