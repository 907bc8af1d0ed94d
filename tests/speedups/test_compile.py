"""The `compile` speed-up: it compiles, reports what dynamo did, warns on recompile storms and cleans up.

Most tests use backend="eager" (dynamo traces, no code generation), as timm does, so they take about a second;
one test, marked slow, runs the real inductor backend on a tiny model.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch._dynamo
from torch import nn

from accel.callbacks import Callback
from accel.config.recipe import TrainConfig, validate_recipe
from accel.errors import RecipeError
from accel.runs.records import EpochRecord
from accel.speedups import Context
from accel.speedups.compile import Compile
from accel.train.run import build_trainer
from accel.train.trainer import Trainer


class Recorder(Callback):
    """Remembers what the trainer looked like inside fit, and every logged record."""

    def __init__(self):
        self.records, self.model, self.forward_loss = [], None, None

    def on_fit_start(self, trainer):
        self.model, self.forward_loss = trainer.model, trainer.engine.forward_loss

    def on_log(self, trainer, record):
        self.records.append(record)


class Breaky(nn.Module):
    """Two linear layers with a graph break between them."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        x = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(x)


def batches(sizes):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)) for n in sizes]


def fit_breaky(cfg: Compile.Config, sizes=(8, 8, 8), val=True, epochs=1):
    torch.manual_seed(0)
    model, recorder = Breaky(), Recorder()
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches(sizes),
        val_loader=batches([8]) if val else None,
        config=TrainConfig(epochs=epochs),
        speedups=[Compile(cfg)],
        callbacks=[recorder],
        device="cpu",
    )
    return trainer, trainer.fit(), recorder


def fit_tiny(tiny, speedups, **train):
    recipe = validate_recipe({**tiny, "speedups": speedups, "train": {"epochs": 2, **train}})
    recorder = Recorder()
    trainer = build_trainer(recipe, extra_callbacks=[recorder])
    return trainer, trainer.fit(), recorder


def test_default_config_is_torch_defaults():
    cfg = Compile.Config()
    assert (cfg.backend, cfg.mode, cfg.fullgraph, cfg.dynamic, cfg.whole_step) == (
        "inductor",
        "default",
        False,
        None,
        False,
    )


@pytest.mark.slow
def test_compiled_model_trains_like_eager(tiny):
    _, plain, _ = fit_tiny(tiny, {})
    trainer, summary, seen = fit_tiny(tiny, {"compile": {"backend": "eager"}})
    assert isinstance(seen.model, torch._dynamo.eval_frame.OptimizedModule)
    assert seen.model._orig_mod is trainer.module
    # the eager backend runs the captured graphs with the same kernels: same numbers as no compile at all
    assert summary["metrics"] == pytest.approx(plain["metrics"], rel=1e-6)
    assert summary["speedup_metrics"]["compile"]["graphs"] >= 1


@pytest.mark.slow
def test_whole_step_compiles_forward_and_loss(tiny):
    _, plain, _ = fit_tiny(tiny, {})
    trainer, summary, seen = fit_tiny(tiny, {"compile": {"backend": "aot_eager", "whole_step": True}})
    assert seen.model is trainer.module  # the model itself is left alone ...
    assert seen.forward_loss != trainer.engine._forward_loss  # ... forward + loss were compiled as one
    assert summary["metrics"]["train_loss"] == pytest.approx(plain["metrics"]["train_loss"], rel=1e-4)


def test_graph_breaks_recompiles_and_seconds_reach_metrics():
    # the last, smaller batch makes dynamo recompile with a dynamic batch dimension; eval recompiles too
    _, summary, recorder = fit_breaky(Compile.Config(backend="eager"), sizes=(8, 8, 5))
    compiled = next(r for r in recorder.records if isinstance(r, EpochRecord)).parts["compile"]
    assert compiled["graph_breaks"] >= 1
    assert compiled["recompiles"] >= 1
    assert compiled["seconds"] > 0
    assert summary["speedup_metrics"]["compile"]["graph_breaks"] == compiled["graph_breaks"]
    # counters are per run, not process totals: a second identical run reports the same numbers
    _, again, _ = fit_breaky(Compile.Config(backend="eager"), sizes=(8, 8, 5))
    first, second = summary["speedup_metrics"]["compile"], again["speedup_metrics"]["compile"]
    assert (second["graph_breaks"], second["recompiles"]) == (first["graph_breaks"], first["recompiles"])


def test_fullgraph_refuses_a_graph_break():
    with pytest.raises(Exception, match="graph_break|graph break"):
        fit_breaky(Compile.Config(backend="eager", fullgraph=True))


def test_warns_when_recompiles_keep_happening(caplog):
    cfg = Compile.Config(backend="eager", dynamic=False, warn_recompiles=2)
    with caplog.at_level(logging.WARNING, logger="accel"):
        fit_breaky(cfg, sizes=(8, 8, 8), val=False)  # steady shapes: nothing to warn about
        assert not [r for r in caplog.records if "keep happening" in r.getMessage()]
        _, summary, _ = fit_breaky(cfg, sizes=(2, 3, 4, 5, 6), val=False)  # every new shape recompiles
    assert summary["speedup_metrics"]["compile"]["recompiles"] >= 4
    warnings = [r.getMessage() for r in caplog.records if "keep happening" in r.getMessage()]
    assert warnings and "forward" in warnings[0]


def test_teardown_restores_dynamo_config_and_caches():
    limit = torch._dynamo.config.recompile_limit
    outside = torch.compile(lambda x: x * 2 + 1, backend="eager")
    outside(torch.ones(3))
    frames = torch._dynamo.utils.counters["frames"]["total"]
    outside(torch.ones(3))
    assert torch._dynamo.utils.counters["frames"]["total"] == frames  # cached: no new compile

    class SeesLimit(Callback):
        def on_fit_start(self, trainer):
            self.limit = torch._dynamo.config.recompile_limit

    seer = SeesLimit()
    model = Breaky()
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches([8, 8]),
        device="cpu",
        speedups=[Compile(Compile.Config(backend="eager", recompile_limit=limit + 3))],
        callbacks=[seer],
    )
    trainer.fit()
    assert seer.limit == limit + 3
    assert torch._dynamo.config.recompile_limit == limit
    assert trainer.model is trainer.module and trainer.engine.forward_loss == trainer.engine._forward_loss
    outside(torch.ones(3))  # torch._dynamo.reset() dropped every cache: this compiles afresh
    assert torch._dynamo.utils.counters["frames"]["total"] > frames


def test_metrics_survive_teardown():
    compile_ = Compile(Compile.Config(backend="eager"))
    model = Breaky()
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), batches([8]), device="cpu", speedups=[compile_]).fit()
    assert compile_.metrics()["graph_breaks"] >= 1


def test_inductor_without_a_cpp_compiler_is_skipped_with_a_reason(monkeypatch):
    from torch._inductor import cpp_builder

    def none_found():
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", none_found)
    cpu = Context(torch.device("cpu"))
    assert "C++ compiler" in Compile().conflict(cpu)
    assert Compile(Compile.Config(backend="aot_eager")).conflict(cpu) is None


@pytest.mark.parametrize(
    "speedup, problem",
    [
        ({"backend": "inductr"}, "unknown torch.compile backend `inductr` (did you mean `inductor`?)"),
        ({"backend": "eager", "mode": "max-autotune"}, "only applies to the inductor backend"),
        ({"mode": "fastest"}, "speedups.compile.mode"),
    ],
)
def test_bad_options_fail_validation_with_the_key(tiny, speedup, problem):
    with pytest.raises(RecipeError, match="speedups.compile") as err:
        validate_recipe({**tiny, "speedups": {"compile": speedup}})
    assert problem in str(err.value)


@pytest.mark.slow
def test_inductor_compiles_a_tiny_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches([8, 8]),
        device="cpu",
        config=TrainConfig(max_steps=2),
        speedups=[Compile()],
    )
    summary = trainer.fit()
    assert summary["steps"] == 2 and math.isfinite(summary["metrics"]["train_loss"])
    assert summary["speedup_metrics"]["compile"]["seconds"] > 0
    assert summary["speedup_metrics"]["compile"]["graphs"] >= 1


@pytest.mark.parametrize("release", [True, False])
def test_compile_workers_are_released_once_compilation_is_over(monkeypatch, release):
    """Inductor keeps its compile-worker processes 60 s after a compilation; accel stops them at the next step."""
    import accel.speedups.compile as compile_module

    released = []
    monkeypatch.setattr(compile_module, "release_compile_workers", lambda: released.append(1))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        batches([8, 8, 8]),
        device="cpu",
        config=TrainConfig(max_steps=3),
        speedups=[Compile(Compile.Config(release_workers=release))],
    )
    trainer.fit()
    assert released == ([1] if release else [])  # compiled in step 1, released entering step 2, not again


@pytest.mark.slow
def test_released_compile_workers_are_forgotten_at_once_and_exit_by_the_end_of_a_benchs_warm_up():
    """The loop does not wait for the pool's sidecar to finish starting (5 s); the sidecar exits all the same, and
    a bench's warm-up waits for it, so the pool's start is not timed."""
    import threading

    from torch._inductor import async_compile, config

    from accel.speedups.compile_workers import release_compile_workers, settle_compile_workers

    # a pool, as on a GPU host (none with one thread); config.patch, since monkeypatch's undo deletes the setting
    with config.patch(compile_threads=2):
        async_compile.AsyncCompile.warm_pool()
    (pool,) = async_compile._pool_set
    release_compile_workers()
    # forgotten: the next compilation makes a new pool instead of using this one
    assert not async_compile._pool_set and async_compile.AsyncCompile.process_pool.cache_info().currsize == 0
    assert any(t.name == "accel-compile-workers" for t in threading.enumerate())  # stopping it on a thread
    settle_compile_workers(timeout=120)  # what a bench does at the end of its warm-up
    assert pool.process.poll() is not None  # the old sidecar has exited
    assert not any(t.name == "accel-compile-workers" for t in threading.enumerate())


def test_a_pool_that_does_not_exit_in_time_is_said_not_waited_for_forever(monkeypatch, caplog):
    import threading

    import accel.speedups.compile_workers as workers

    stuck = threading.Event()
    thread = threading.Thread(target=stuck.wait, daemon=True)
    thread.start()
    monkeypatch.setattr(workers, "_stopping", [thread])
    with caplog.at_level("WARNING", logger="accel"):
        waited = workers.settle_compile_workers(timeout=0.2)
    stuck.set()
    assert 0.2 <= waited < 5
    assert "compile workers did not exit within" in caplog.text and not workers._stopping


def test_regional_compiles_each_repeated_block_once_and_trains_like_eager():
    from accel.models import GPT
    from accel.tasks import LanguageModel

    def fit(cfg):
        torch.manual_seed(0)
        model = GPT(vocab_size=16, context=8, width=16, depth=3, heads=2)
        tokens = torch.randint(0, 16, (4, 9))
        batches = [(tokens[:, :-1], tokens[:, 1:])] * 3
        compiled = []
        model.blocks[1].register_forward_pre_hook(lambda m, a: compiled.append(m._compiled_call_impl is not None))
        speedups = [Compile(Compile.Config(**cfg))] if cfg is not None else []
        trainer = Trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            batches,
            val_loader=batches,
            task=LanguageModel(),
            speedups=speedups,
            device="cpu",
            config=TrainConfig(epochs=1),
        )
        return trainer, trainer.fit(), compiled

    _, plain, _ = fit(None)
    trainer, summary, compiled = fit({"backend": "eager", "regional": True})
    assert trainer.model is trainer.module and compiled and all(compiled)  # the blocks, not the model, compiled
    assert trainer.module.blocks[1]._compiled_call_impl is None  # teardown: plain calls again
    assert summary["metrics"] == pytest.approx(plain["metrics"], rel=1e-6)
    assert summary["speedup_metrics"]["compile"]["graphs"] <= 2  # one graph for 3 blocks (train; eval may add one)


def test_regional_and_whole_step_are_refused_together(tiny):
    tiny["speedups"] = {"compile": {"regional": True, "whole_step": True}}
    with pytest.raises(RecipeError, match="choose one"):
        validate_recipe(tiny)
