"""The `cuda_graphs` speed-up: every refusal says why and leaves the run eager (CPU), and on a GPU the captured step
trains like the eager one (`cuda`-marked: skipped with the reason where there is no GPU)."""

from __future__ import annotations

import pytest
import torch

from accel.errors import AccelError, SpeedupUnavailable
from accel.speedups import Context, RunFacts, refusals, refuse
from accel.speedups.compile import Compile
from accel.speedups.cuda_graphs import CudaGraphs, make_capturable
from accel.strategy import Strategy
from conftest import assert_captured_step_trains_alike, cuda_only

from .conftest import tiny_trainer, weights

CUDA = torch.device("cuda")  # a device object needs no GPU: the conflict rule only reads its type


def test_off_cuda_it_is_skipped_with_the_reason_and_the_run_trains_eagerly():
    summary = tiny_trainer({"cuda_graphs": {}}).fit()
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert summary["speedups"] == [] and "needs CUDA" in summary["skipped_speedups"]["cuda_graphs"]


def test_strict_turns_the_skip_into_an_error():
    with pytest.raises(SpeedupUnavailable, match="cuda_graphs.*needs CUDA"):
        tiny_trainer({"cuda_graphs": {}}, strict=True)


@pytest.mark.parametrize(
    "context, reason",
    [
        (Context(CUDA, precision="fp16"), "GradScaler reads its inf/NaN check on the host"),
        (Context(CUDA, strategy="ddp"), "strategy ddp"),
        (Context(CUDA, others=(Compile(),)), "cannot be stacked"),
    ],
)
def test_what_capture_cannot_follow_is_refused_with_its_reason(context, reason):
    assert reason in CudaGraphs().conflict(context)
    assert CudaGraphs().conflict(Context(CUDA, precision="bf16")) is None


def test_the_runs_own_choices_refuse_it_before_setup_all_at_once_as_any_conflict():
    trainer = tiny_trainer(
        {},
        optim={"name": "sgd", "lr": 0.05},
        schedule={"name": "cosine"},
        train={"grad_accum": 2},
        data={"drop_last": False},
    )
    facts = trainer.engine.run_facts()  # what the Trainer's engine tells the rule before setup
    assert (facts.grad_accum, facts.drop_last, facts.scheduled, facts.task) == (2, False, True, "classification")
    reason = CudaGraphs().conflict(Context(CUDA, run=facts))
    assert reason.startswith("gradient accumulation (2 micro-batches a step)")
    assert "; the training loader keeps its last incomplete batch" in reason and "`data.drop_last: true`" in reason
    assert "; SGD has no `capturable` option" in reason and "or no schedule" in reason
    graphs, compiled = CudaGraphs(), Compile()
    with pytest.raises(AccelError) as err:
        refuse([graphs, compiled], CUDA, Strategy(), "fp32", run=facts)
    lines = str(err.value).splitlines()
    assert lines[0] == "these speed-ups cannot run with the recipe's other choices:"
    assert lines[1].startswith("  - `speedups.cuda_graphs`: speed-ups `cuda_graphs` and `compile` both turn")
    assert "; gradient accumulation (2 micro-batches a step)" in lines[1]
    assert lines[2].startswith("  - `speedups.compile`: ")  # another speed-up's conflict, in the same error
    assert lines[-1] == "Disable them (`--set speedups.NAME.enabled=false`)."
    assert CudaGraphs().conflict(Context(CUDA, run=RunFacts(grad_accum=1, drop_last=True))) is None


def test_the_run_facts_leave_a_skip_a_skip():
    facts = RunFacts(grad_accum=4, drop_last=False)
    assert refusals([CudaGraphs()], torch.device("cpu"), Strategy(), run=facts) == []  # the device skips it first
    assert "fp16" in CudaGraphs().conflict(Context(CUDA, "fp16", run=facts))


def test_a_constant_lr_sgd_run_with_steady_batches_has_nothing_to_refuse():
    facts = tiny_trainer({}, optim={"name": "sgd", "lr": 0.05}).engine.run_facts()
    assert CudaGraphs().conflict(Context(CUDA, run=facts)) is None


def test_make_capturable_turns_the_flag_on_and_moves_resumed_step_counts():
    trainer = tiny_trainer({}, train={"max_steps": 1})
    trainer.fit()  # AdamW state with step counts on the CPU, as an eager checkpoint holds them
    make_capturable(trainer.optimizer)
    assert all(group["capturable"] for group in trainer.optimizer.param_groups)
    steps = [state["step"] for state in trainer.optimizer.state.values()]
    assert steps and all(s.dtype == torch.float32 for s in steps)
    sgd = tiny_trainer({}, optim={"name": "sgd", "lr": 0.05}).optimizer
    make_capturable(sgd)
    assert "capturable" not in sgd.param_groups[0]


GPU_RUN = {"optim": {"name": "adamw", "lr": 1e-2}, "schedule": {"name": "cosine", "warmup_steps": 2}}


@cuda_only
@pytest.mark.parametrize("amp", [{}, {"amp": {"dtype": "bf16"}}])
def test_the_captured_step_trains_like_the_eager_step_on_cuda(amp):
    train = {"max_steps": 8, "clip_grad_norm": 1.0}
    eager = tiny_trainer(amp, device="cuda", train=train, **GPU_RUN)
    graphed = tiny_trainer({**amp, "cuda_graphs": {"warmup_steps": 3}}, device="cuda", train=train, **GPU_RUN)
    start = weights(eager)
    losses = [t.fit()["metrics"]["train_loss"] for t in (eager, graphed)]
    assert graphed.skipped_speedups == {}
    assert next(s for s in graphed.speedups if s.name == "cuda_graphs").metrics() == {"captured": True}
    assert_captured_step_trains_alike(([losses[0]], weights(eager)), ([losses[1]], weights(graphed)), start, bool(amp))


@cuda_only
def test_a_host_sync_in_the_loss_is_named_before_capture():
    def syncing_loss(model, batch):
        inputs, targets = batch
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        if loss.item() < 0:  # a host sync
            raise AssertionError
        return loss

    trainer = tiny_trainer({"cuda_graphs": {}}, device="cuda", train={"max_steps": 4}, **GPU_RUN)
    trainer.engine.loss = lambda batch: syncing_loss(trainer.model, batch)
    with pytest.raises(AccelError, match="waits for the GPU on the host"):
        trainer.fit()
