"""accel.Engine in a hand-written loop: the same numbers as the plain loop, the user's model and optimizer kept as
theirs, the speed-ups set up, and what the loop already does said or refused."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accel
from accel import devices
from accel.errors import AccelError, RecipeError
from accel.registry import SPEEDUPS
from accel.runs.records import LoopSummary
from accel.speedups import Speedup
from conftest import ROOT


class Net(nn.Module):
    """A convolution and a head, with attributes and methods of its own (as nanoGPT's GPT has)."""

    def __init__(self):
        super().__init__()
        self.config = {"width": 8}
        self.conv, self.head = nn.Conv2d(3, 8, 3), nn.Linear(8, 4)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1).flatten(1))

    def describe(self) -> str:
        return f"Net of width {self.config['width']}"


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(48, 3, 10, 10, generator=g), torch.randint(0, 4, (48,), generator=g))


def fresh(lr: float = 0.05) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def plain_loop(epochs: int = 2) -> tuple[list[float], dict]:
    model, optimizer = fresh()
    torch.manual_seed(1)
    losses = []
    for _ in range(epochs):
        for x, y in DataLoader(data(), batch_size=16, shuffle=True):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return losses, model.state_dict()


def engine_loop(speedups=None, epochs: int = 2, **kwargs) -> tuple[list[float], dict, accel.Engine]:
    model, optimizer = fresh()
    eng = accel.Engine(speedups=speedups, device="cpu", **kwargs)
    model, optimizer = eng.setup(model, optimizer)
    torch.manual_seed(1)
    loader = eng.setup_dataloaders(DataLoader(data(), batch_size=16, shuffle=True))
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            with eng.autocast():
                loss = F.cross_entropy(model(x), y)
            eng.backward(loss)
            eng.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
    eng.close()
    return losses, model.state_dict(), eng


def test_without_speedups_the_engine_loop_is_the_plain_loop_bit_for_bit():
    plain, plain_weights = plain_loop()
    mine, my_weights, eng = engine_loop()
    assert mine == plain
    for key, value in plain_weights.items():
        assert torch.equal(my_weights[key], value)
    assert eng.steps == 6 and eng.summary()["samples"] == 96


@pytest.mark.parametrize(
    "speedups",
    [
        {"amp": {"dtype": "bf16"}},
        {"channels_last": {}},
        {"compile": {"backend": "eager"}},
        {"compile": {"backend": "eager", "regional": True}},
        {"optim": {"impl": "foreach"}},
        {"threads": {"intra_op": 2}},
        {"ema": {"decay": 0.9}},
        {"activation_checkpointing": {}},
        {"attention": {"backend": "math"}},
        {"cudnn": {"float32_matmul_precision": "high"}},
        {"jit": {"method": "trace"}},
    ],
    ids=lambda s: next(iter(s)),
)
def test_every_cpu_speedup_runs_in_an_own_loop(speedups):
    plain, _ = plain_loop()
    mine, _, eng = engine_loop(speedups)
    assert eng.summary()["speedups"] == list(speedups) or eng._core.skipped_speedups
    tolerance = 0.05 if "amp" in speedups else 1e-4  # bf16 rounds; the others compute the same sums
    assert mine == pytest.approx(plain, rel=tolerance, abs=tolerance)


def test_channels_last_changes_the_batches_and_bf16_never_casts_them():
    eng = accel.Engine(speedups={"channels_last": {}, "amp": {"dtype": "bf16"}}, device="cpu")
    eng.setup(*fresh())
    x, y = next(iter(eng.setup_dataloaders(DataLoader(data(), batch_size=4))))
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert x.dtype == torch.float32 and y.dtype == torch.int64  # autocast casts inside ops, not the inputs
    eng.close()


def test_the_model_stays_the_users_through_compile():
    eng = accel.Engine(speedups={"compile": {"backend": "eager"}}, device="cpu")
    model, optimizer = eng.setup(*fresh())
    assert isinstance(model, Net) and model.config == {"width": 8} and model.describe() == "Net of width 8"
    assert list(model.state_dict()) == ["conv.weight", "conv.bias", "head.weight", "head.bias"]
    assert [name for name, _ in model.named_parameters()] == list(model.state_dict())
    assert type(eng._core.model).__name__ == "OptimizedModule"  # ... while calls run the compiled model
    model(torch.randn(2, 3, 10, 10)).sum().backward()
    optimizer.step()
    twin = copy.deepcopy(model)  # an EMA copy the loop takes: a plain Net running its own weights
    assert type(twin) is Net
    with torch.no_grad():
        twin.head.bias.add_(1.0)
        assert not torch.equal(twin(torch.ones(1, 3, 10, 10)), model(torch.ones(1, 3, 10, 10)))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    assert type(torch.load(buffer, weights_only=False)) is Net
    model.eval()
    assert not eng._core.model.training and not model.training
    eng.close()


def test_the_optimizer_is_the_users_param_groups_and_all():
    model, real = fresh(lr=0.1)
    eng = accel.Engine(device="cpu")
    model, optimizer = eng.setup(model, real)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups is real.param_groups and optimizer.state is real.state
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)  # schedulers take it
    for group in optimizer.param_groups:
        group["lr"] = 0.0  # the loop sets its own learning rate: nothing moves
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(2, 3, 10, 10)).sum().backward()
    optimizer.step()
    schedule.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert eng.steps == 1 and real.state  # the real optimizer stepped (with lr 0)
    eng.close()


def _halving_schedule():
    """An engine set up with a model, SGD at lr 1 and a schedule halving it at every step."""
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    eng = accel.Engine(device="cpu")
    model, optimizer = eng.setup(model, optimizer, schedule)
    return eng, model, optimizer, schedule


@pytest.mark.parametrize("compiled", [False, True], ids=["own-step", "compile_step"])
def test_a_scheduler_given_to_setup_is_stepped_by_the_loop_alone(compiled):
    eng, model, optimizer, schedule = _halving_schedule()
    step = eng.compile_step(lambda x: model(x).sum())
    for _ in range(4):
        if compiled:
            step(torch.ones(2, 4))
        else:
            eng.backward(model(torch.ones(2, 4)).sum())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        schedule.step()  # as every PyTorch loop does
    assert optimizer.param_groups[0]["lr"] == 1 / 16  # 4 halvings, not 8
    assert eng._core.run_facts().scheduled  # what the conflict rule sees: a schedule changes the rate between steps
    eng.close()


def test_a_scheduler_stepped_twice_an_optimizer_step_is_said_once(caplog):
    eng, model, optimizer, schedule = _halving_schedule()
    with caplog.at_level("WARNING", logger="accel"):
        for i in range(4):
            eng.backward(model(torch.ones(2, 4)).sum())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if i >= 1:
                schedule.step()  # a second step of the schedule in the same optimizer step
    said = [r.getMessage() for r in caplog.records if "advanced 2 times" in r.getMessage()]
    assert len(said) == 1 and "StepLR" in said[0] and "step it once after each optimizer.step()" in said[0]
    eng.close()


def test_the_loss_is_never_divided_behind_the_loops_back():
    model, optimizer = fresh()
    eng = accel.Engine(device="cpu", grad_accum=4)  # the Trainer's accumulation: not the loop's backward
    model, optimizer = eng.setup(model, optimizer)
    x, y = data()[:8]
    eng.backward(F.cross_entropy(model(x), y))
    mine = [p.grad.clone() for p in model.parameters()]
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(mine, model.parameters()))
    eng.close()


def test_ema_averages_optimizer_steps_not_micro_batches():
    eng = accel.Engine(speedups={"ema": {"decay": 0.5, "warmup": False}}, device="cpu")
    model, optimizer = eng.setup(*fresh())
    x, y = data()[:8]
    for _ in range(3):  # three steps of four micro-batches
        for micro in range(4):
            with eng.no_sync(model) if micro < 3 else eng.autocast():
                loss = F.cross_entropy(model(x), y) / 4
                eng.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    ema = next(s for s in eng._core.speedups if s.name == "ema")
    assert ema.metrics()["updates"] == 3
    eng.close()


def test_no_sync_must_cover_the_forward_too():
    eng = accel.Engine(device="cpu")
    model, _ = eng.setup(*fresh())
    x, y = data()[:4]
    loss = F.cross_entropy(model(x), y)
    with pytest.raises(AccelError, match="no_sync must cover the forward as well as the backward"):
        with eng.no_sync(model):
            eng.backward(loss)
    eng.close()


@pytest.mark.parametrize("inside", [True, False])
def test_an_autocast_of_the_loops_own_beside_amp_is_refused(inside):
    eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}}, device="cpu")
    model, _ = eng.setup(*fresh())
    x = torch.randn(2, 3, 10, 10)
    said = r"(autocast of its own|inside an autocast the loop opened).*drop `speedups.amp`"  # the precision's
    with pytest.raises(AccelError, match=said):
        if inside:
            with eng.autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
                model(x)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16), eng.autocast():
                model(x)
    eng.close()


def test_a_loops_own_autocast_without_amp_is_its_own_business():
    eng = accel.Engine(device="cpu")
    model, _ = eng.setup(*fresh())
    with eng.autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(torch.randn(2, 3, 10, 10)).dtype == torch.bfloat16
    eng.close()


def test_a_model_compiled_twice_is_refused_and_compiled_once_is_kept():
    model, optimizer = fresh()
    compiled = torch.compile(model, backend="eager")
    eng = accel.Engine(speedups={"compile": {"backend": "eager"}}, device="cpu")
    with pytest.raises(AccelError, match="compiled already .* would compile it again"):
        eng.setup(compiled, optimizer)
    eng = accel.Engine(device="cpu")
    mine, _ = eng.setup(compiled, optimizer)
    assert eng._core.model is compiled and list(mine.state_dict())[0] == "conv.weight"  # no _orig_mod. prefix
    eng.close()


def test_a_whole_step_speedup_needs_the_step_as_one_function():
    eng = accel.Engine(speedups={"compile": {"backend": "eager", "whole_step": True}}, device="cpu")
    model, optimizer = eng.setup(*fresh())
    with pytest.raises(AccelError, match=r"replaces the whole training step.*eng.compile_step\(fn\)"):
        with eng.autocast():
            pass
    step = eng.compile_step(lambda x, y: F.cross_entropy(model(x), y))
    x, y = data()[:8]
    losses = [step(x, y).item() for _ in range(3)]
    assert losses[-1] < losses[0] and eng.steps == 3
    assert all(p.grad is None for p in model.parameters())  # the step cleared them
    eng.close()


@pytest.mark.slow
def test_fp16_steps_skip_and_update_through_the_loops_optimizer_step(monkeypatch):
    monkeypatch.setattr(devices, "supports_fp16_scaler", lambda device: True)  # torch has a CPU GradScaler
    eng = accel.Engine(speedups={"amp": {"dtype": "fp16", "init_scale": 1024.0}}, device="cpu")
    model, optimizer = eng.setup(*fresh())
    scaler = eng._core.strategy.precision.scaler
    x, y = data()[:8]
    with eng.autocast():
        loss = F.cross_entropy(model(x), y)
    eng.backward(loss)
    norm = eng.clip_gradients(model, optimizer, max_norm=0.5)  # unscaled first: a true norm
    assert norm < 100
    optimizer.step()  # no second unscale: the scaler would refuse it
    assert scaler.get_scale() == 1024.0 and eng.steps == 1
    optimizer.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    with eng.autocast():
        loss = F.cross_entropy(model(x), y) * float("inf")
    eng.backward(loss)
    optimizer.step()  # inf gradients: skipped, the scale lowered
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 512.0 and eng._core.strategy.precision.skipped_steps == 1
    own = torch.amp.GradScaler("cpu")
    with eng.autocast():
        loss = F.cross_entropy(model(x), y)
    eng.backward(own.scale(loss))
    with pytest.raises(AccelError, match="GradScaler of its own"):
        own.step(optimizer)
    eng.close()


def test_accel_set_overrides_the_script_and_names_a_wrong_key(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCEL_SET", "speedups.channels_last.enabled=false speedups.compile.backend=eager")
    eng = accel.Engine(speedups={"channels_last": {}, "compile": {}}, device="cpu")
    assert [s.name for s in eng._core.speedups] == ["compile"] and eng._core.speedups[0].cfg.backend == "eager"
    monkeypatch.setenv("ACCEL_SET", "speedups.compile.enable=false")
    with pytest.raises(RecipeError, match=r"ACCEL_SET speedups.compile.enable=false.*did you mean `enabled`"):
        accel.Engine(speedups={"compile": {}}, device="cpu")
    monkeypatch.setenv("ACCEL_SET", "speedup.amp.dtype=bf16")
    with pytest.raises(RecipeError, match=r"`speedup` is not an engine setting \(did you mean `speedups`"):
        accel.Engine(device="cpu")
    monkeypatch.delenv("ACCEL_SET")
    (tmp_path / "fast.yaml").write_text("speedups:\n  channels_last: {}\n")
    monkeypatch.setenv("ACCEL_SPEEDUPS", str(tmp_path / "fast.yaml"))
    assert [s.name for s in accel.Engine(speedups={"compile": {}}, device="cpu")._core.speedups] == ["channels_last"]


def test_an_unbalanced_quote_in_accel_set_names_the_variable_and_its_text(monkeypatch):
    monkeypatch.setenv("ACCEL_SET", "speedups.amp.dtype='bf16")
    with pytest.raises(RecipeError) as err:
        accel.Engine(device="cpu")
    assert str(err.value) == (
        'ACCEL_SET="speedups.amp.dtype=\'bf16" cannot be split into items: No closing quotation. It is read as a '
        "shell reads arguments: close the quote, or quote an item that holds spaces whole "
        "(ACCEL_SET=\"'speedups.amp={dtype: bf16}' device=cpu\")."
    )


def test_an_accel_speedups_file_with_a_misspelt_top_key_is_refused_not_read_as_no_speedups(monkeypatch, tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text("# tuned\nspeedup:\n  channels_last: {}\n")
    monkeypatch.setenv("ACCEL_SPEEDUPS", str(path))
    with pytest.raises(RecipeError) as err:
        accel.Engine(speedups={"compile": {}}, device="cpu")
    assert f"{path}, line 2: `speedup` is not a valid key (did you mean `speedups`?)" in str(err.value)
    assert str(err.value).startswith(f"ACCEL_SPEEDUPS: {path}: only its `speedups:` section is read")
    path.write_text("device: cpu\nspeedups:\n  channels_last: {}\n")  # a recipe's other keys are left alone
    assert [s.name for s in accel.Engine(speedups={"compile": {}}, device="cpu")._core.speedups] == ["channels_last"]


def test_speedups_by_preset_name_and_file(tmp_path):
    assert {s.name for s in accel.Engine(speedups="fast-cpu", device="cpu")._core.speedups} <= {
        "amp",
        "channels_last",
        "compile",
    }
    (tmp_path / "mine.yaml").write_text("speedups:\n  channels_last: {}\n")
    mine = accel.Engine(speedups=tmp_path / "mine.yaml", device="cpu")
    assert [s.name for s in mine._core.speedups] == ["channels_last"]
    with pytest.raises(RecipeError, match="neither a YAML file nor a preset"):
        accel.Engine(speedups="no-such-preset", device="cpu")


def test_teardown_restores_global_flags():
    threads = torch.get_num_threads()
    with accel.Engine(speedups={"threads": {"intra_op": 1}}, device="cpu") as eng:
        eng.setup(*fresh())
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == threads


def test_a_loops_own_grad_scaler_without_accels_fp16_steps_as_usual():
    eng = accel.Engine(device="cpu")
    model, optimizer = eng.setup(*fresh())
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
    x, y = data()[:8]
    eng.backward(scaler.scale(F.cross_entropy(model(x), y)))
    before = model.head.bias.detach().clone()
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(before, model.head.bias) and eng.steps == 1
    eng.close()


def resumable_loop(path, stop_at: int | None, resume: bool) -> tuple[list[float], list[int]]:
    """Two epochs of three batches, with a schedule and a loop counter of its own; stops after `stop_at` steps
    (saving), or resumes from `path` first. Returns its losses and the first label of each batch it saw."""
    model, optimizer = fresh()
    eng = accel.Engine(speedups={"ema": {"decay": 0.5}}, device="cpu")
    model, optimizer = eng.setup(model, optimizer)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    torch.manual_seed(1)
    loader = eng.setup_dataloaders(DataLoader(data(), batch_size=16, shuffle=True))
    state = {"model": model, "optimizer": optimizer, "schedule": schedule, "loader": loader, "step": 0}
    if resume:
        torch.manual_seed(999)  # another process: its own random state, until load puts the saved one back
        eng.load(path, state)
    losses, seen = [], []
    while state["step"] < 6:
        for x, y in loader:
            with eng.autocast():
                loss = F.cross_entropy(model(x), y)
            eng.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
            losses.append(loss.item())
            seen.append(int(y[0]))
            state["step"] += 1
            if state["step"] == stop_at:
                eng.save(path, state)
                eng.close()
                return losses, seen
    eng.close()
    return losses, seen


def test_a_loop_resumed_twice_within_an_epoch_sees_the_uninterrupted_batches(tmp_path):
    path = tmp_path / "ckpt.pt"
    whole = resumable_loop(path, None, False)
    first = resumable_loop(path, 2, False)  # mid-epoch 1
    second = resumable_loop(path, 4, True)  # mid-epoch 2
    third = resumable_loop(path, None, True)
    assert first[1] + second[1] + third[1] == whole[1]
    assert first[0] + second[0] + third[0] == whole[0]


def test_load_names_what_the_checkpoint_lacks(tmp_path):
    eng = accel.Engine(device="cpu")
    model, optimizer = eng.setup(*fresh())
    eng.save(tmp_path / "a.pt", {"model": model})
    with pytest.raises(accel.AccelError, match="holds no optimizer"):
        eng.load(tmp_path / "a.pt", {"model": model, "optimizer": optimizer})
    torch.save({"model": model.state_dict()}, tmp_path / "plain.pt")
    with pytest.raises(accel.AccelError, match="not written by `eng.save`"):
        eng.load(tmp_path / "plain.pt", {"model": model})
    eng.close()


def test_a_call_outside_eng_autocast_runs_in_the_precision_and_returns_fp32():
    eng = accel.Engine(speedups={"amp": {"dtype": "bf16"}}, device="cpu")
    model, _ = eng.setup(*fresh())
    x = torch.randn(4, 3, 10, 10)
    out = model(x)
    assert out.dtype == torch.float32  # a loss computed after it is computed in fp32 ...
    with torch.no_grad():
        exact = Net.forward(model, x)  # the module's own forward, no autocast
    assert not torch.equal(out.detach(), exact)  # ... from a forward that ran in bf16
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(AccelError, match="replace the loop's"):
        model(x)
    eng.close()


def test_accumulation_skips_the_reduction_on_all_but_the_last_micro_batch():
    from contextlib import contextmanager

    from accel.strategy import Strategy

    skipped = []

    class Recording(Strategy):
        @contextmanager
        def no_sync(self, module):
            skipped.append(eng._core.count.micro_batches)
            yield

    eng = accel.Engine(strategy=Recording(), device="cpu", grad_accum=3)
    model, optimizer = eng.setup(*fresh())
    x, y = data()[:4]
    for _ in range(2):
        for _ in range(3):
            eng.backward(F.cross_entropy(model(x), y) / 3)
        optimizer.step()
    assert skipped == [1, 2, 1, 2]  # forward and backward of micro-batches 1 and 2 of each step
    eng.backward(F.cross_entropy(model(x), y))
    with pytest.raises(AccelError, match="after 1 micro-batches, but the engine was given grad_accum=3"):
        optimizer.step()
    eng.close()


def test_measuring_leaves_the_loops_random_stream_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_PEAKS_CACHE", str(tmp_path / "peaks.json"))  # the CPU's peak probed afresh
    plain, _ = plain_loop()
    mine, _, eng = engine_loop()
    assert mine == plain  # the batches' order came from the same random stream
    summary = eng.summary()
    assert summary["flops_per_sample"] > 0 and summary["mfu"] is not None
    assert isinstance(summary["lint"], list)


def test_flops_are_counted_when_the_summary_asks_not_in_the_loops_first_step():
    eng = accel.Engine(device="cpu")
    model, optimizer = eng.setup(*fresh())
    x, y = data()[:8]
    eng.backward(F.cross_entropy(model(x), y))
    optimizer.step()
    assert not eng._loop.utilisation.counted  # the loop's own first step paid nothing for it
    assert eng.summary()["flops_per_sample"] > 0 and eng._loop.utilisation.counted
    eng.close()


def test_a_run_directory_of_its_own_with_out(tmp_path):
    with accel.Engine(device="cpu", out=tmp_path / "run") as eng:
        model, optimizer = eng.setup(*fresh())
        x, y = data()[:8]
        for _ in range(3):
            eng.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        eng.log({"val_loss": torch.tensor(1.5)})
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 3, "val_loss": 1.5}]
    summary = LoopSummary.model_validate_json((tmp_path / "run" / "summary.json").read_text())
    assert summary.steps == 3 and summary.samples == 24 and summary.metrics["val_loss"] == 1.5
    assert list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))


def test_an_out_that_is_a_file_is_refused_when_the_engine_is_made(tmp_path):
    path = tmp_path / "run"
    path.write_text("not a folder")
    with pytest.raises(AccelError, match=rf"accel.Engine\(out=\) {path}: {path} is a file, not a folder"):
        accel.Engine(device="cpu", out=path)


def _loop_into(out, steps: int, resume: bool = False, checkpoint=None, load=None) -> None:
    """A loop of `steps` optimizer steps into `out`, logging every 5th; saving at step 5 or loading first."""
    with accel.Engine(device="cpu", out=out, resume=resume) as eng:
        model, optimizer = eng.setup(*fresh())
        if load is not None:
            eng.load(load, {"model": model, "optimizer": optimizer})
        x, y = data()[:8]
        while eng.steps < steps:
            eng.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            if eng.steps % 5 == 0:
                eng.log({"loss": 1.0})
            if eng.steps == 5 and checkpoint is not None:
                eng.save(checkpoint, {"model": model, "optimizer": optimizer})


def test_an_out_holding_an_earlier_runs_records_is_refused_or_continued_with_resume(tmp_path):
    """Two runs of a loop into one out= left metrics.jsonl reading steps 5, 10, 5."""
    out, checkpoint = tmp_path / "run", tmp_path / "ckpt.pt"
    _loop_into(out, 10, checkpoint=checkpoint)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    held = r"\(metrics.jsonl, summary.json, tb\)"
    said = rf"accel.Engine\(out=\) {re.escape(str(out))} holds an earlier run's records {held}"
    with pytest.raises(AccelError, match=said):
        accel.Engine(device="cpu", out=out)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    _loop_into(out, 10, resume=True, load=checkpoint)  # from step 5: its own step 10 replaces the earlier one
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [5, 10]
    assert LoopSummary.model_validate_json((out / "summary.json").read_text()).steps == 10


def test_a_group_torchrun_restarted_continues_its_own_records(tmp_path, monkeypatch):
    """`accel run --max-restarts` re-runs the same command: its restarted attempt is no second run."""
    out, checkpoint = tmp_path / "run", tmp_path / "ckpt.pt"
    _loop_into(out, 10, checkpoint=checkpoint)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    _loop_into(out, 10, load=checkpoint)
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [5, 10]


def test_an_out_holding_an_accel_train_run_is_refused_even_to_resume(tmp_path):
    """An engine over a recipe's run replaced its summary.json: its status "completed" was gone."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("name: quickstart\n")
    (run / "summary.json").write_text('{"status": "completed"}\n')
    for resume in (False, True):
        with pytest.raises(AccelError, match=r"holds an `accel train` run \(recipe.yaml\)"):
            accel.Engine(device="cpu", out=run, resume=resume)
    assert (run / "summary.json").read_text() == '{"status": "completed"}\n'


def test_resume_without_an_out_is_refused():
    with pytest.raises(AccelError, match=r"accel.Engine\(resume=True\) continues the records in `out`"):
        accel.Engine(device="cpu", resume=True)


def test_a_trials_engine_is_not_refused_an_out_holding_the_real_runs_records(tmp_path, monkeypatch):
    from accel.engine import trial_variables
    from accel.engine.loop_records import records_folder

    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n')
    with pytest.raises(AccelError, match="holds an earlier run's records"):
        records_folder(tmp_path, resume=False)
    monkeypatch.setenv(trial_variables.PATH, str(tmp_path / "trial.json"))  # it writes nothing there
    assert records_folder(tmp_path, resume=False) == tmp_path


@pytest.mark.parametrize("grad_accum", [0, -1, 2.5, "2", True])
def test_grad_accum_that_is_not_a_whole_number_of_at_least_one_is_refused(grad_accum):
    with pytest.raises(AccelError, match=rf"accel.Engine\(grad_accum={grad_accum!r}\): micro-batches per optimizer"):
        accel.Engine(device="cpu", grad_accum=grad_accum)


def test_an_optimizer_over_other_tensors_is_refused():
    model, _ = fresh()
    stale = torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1)  # as one built before model.to(xla) would be
    with pytest.raises(AccelError, match=r"create the optimizer after `model.to\(device\)`"):
        accel.Engine(device="cpu").setup(model, stale)


def test_a_loader_already_sharded_per_rank_is_left_alone():
    from torch.utils.data import DistributedSampler

    from accel.engine.dataloaders import sharded
    from accel.strategy.world import World

    two = World(rank=1, size=2)
    mine = DataLoader(data(), batch_size=4, sampler=DistributedSampler(data(), num_replicas=2, rank=1))
    assert sharded(mine, two) is mine  # not a shard of a shard (Accelerate #4075)
    plain = sharded(DataLoader(data(), batch_size=4, shuffle=True), two)
    assert isinstance(plain.sampler, DistributedSampler) and plain.sampler.rank == 1 and len(plain) == 6


def test_a_model_already_in_ddp_is_refused(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        model, optimizer = fresh()
        wrapped = nn.parallel.DistributedDataParallel(model)
        with pytest.raises(AccelError, match="wrapped in DistributedDataParallel already"):
            accel.Engine(device="cpu").setup(wrapped, optimizer)
    finally:
        del wrapped
        dist.destroy_process_group()


def test_a_combination_the_conflict_rule_refuses_names_the_engines_settings():
    eng = accel.Engine(speedups={"compile": {"backend": "eager"}, "jit": {}}, device="cpu")
    with pytest.raises(AccelError, match=r"the engine's other choices(.|\n)*ACCEL_SET=speedups.NAME.enabled=false"):
        eng.setup(*fresh())


class SteadyShapes(Speedup):
    """A stand-in, runnable on the CPU, for a speed-up that needs one batch shape and one micro-batch a step (as
    cuda_graphs does on CUDA): its conflict reads the run's facts the engine gives the rule."""

    name = "steady_shapes"

    def conflict(self, context):
        problems = [f"grad_accum is {context.run.grad_accum}"] if context.run.grad_accum > 1 else []
        if context.run.drop_last is False:
            problems.append("the loader keeps its last incomplete batch")
        return "; ".join(problems) or None


@pytest.fixture
def steady_shapes():
    SPEEDUPS.register(SteadyShapes.name)(SteadyShapes)
    try:
        yield
    finally:
        SPEEDUPS._entries.pop(SteadyShapes.name, None)


def test_the_loops_accumulation_is_refused_before_setup_as_any_conflict(steady_shapes):
    eng = accel.Engine(speedups={"steady_shapes": {}, "optim": {"impl": "fused"}}, device="cpu", grad_accum=2)
    model = Net()
    with pytest.raises(AccelError) as err:
        eng.setup(model, torch.optim.RMSprop(model.parameters(), lr=0.01))  # torch has no fused RMSprop
    lines = str(err.value).splitlines()
    assert lines[0] == "these speed-ups cannot run with the engine's other choices:"
    assert sorted(lines[1:3]) == [
        "  - `speedups.optim`: RMSprop has no fused kernel for its parameters here "
        f"(torch {torch.__version__}); use `impl: auto` (fused only where it works) or an optimizer that has one "
        "(adamw, sgd)",
        "  - `speedups.steady_shapes`: grad_accum is 2",
    ]
    assert lines[3] == "Disable them (`ACCEL_SET=speedups.NAME.enabled=false`)."
    assert not eng._core._set_up and eng._core.model is model  # nothing was set up


def test_a_loader_given_after_setup_is_judged_before_the_first_step(steady_shapes):
    eng = accel.Engine(speedups={"steady_shapes": {}, "channels_last": {}}, device="cpu")
    eng.setup(*fresh())  # the loader is not known yet: nothing to refuse
    assert eng._core._set_up and eng._core.run_facts().drop_last is None
    with pytest.raises(AccelError, match="`speedups.steady_shapes`: the loader keeps its last incomplete batch"):
        eng.setup_dataloaders(DataLoader(data(), batch_size=10, drop_last=False))
    assert not eng._core._set_up  # torn down: no speed-up's global is left behind
    steady = accel.Engine(speedups={"steady_shapes": {}}, device="cpu")
    steady.setup(*fresh())
    steady.setup_dataloaders(DataLoader(data(), batch_size=10, drop_last=True))
    assert steady._core.run_facts().drop_last is True and steady._core._set_up


@pytest.mark.slow
def test_a_script_accel_refuses_ends_with_the_message_alone(tmp_path):
    """A misspelt ACCEL_SET key in `python train.py`: the refusal, not a traceback around it, and no line before it
    saying the override applies."""
    script = tmp_path / "train.py"
    script.write_text("import accel\naccel.Engine(device='cpu')\nprint('never here')\n")
    env = os.environ | {"ACCEL_SET": "speedup.amp.dtype=bf16"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "never here" not in done.stdout
    assert done.stderr.startswith("accel: ") and "`speedup` is not an engine setting" in done.stderr
    assert "Traceback" not in done.stderr and "overrides the script" not in done.stderr
    kept = subprocess.run(
        [sys.executable, str(script)], env=env | {"ACCEL_TRACEBACK": "1"}, capture_output=True, text=True, timeout=120
    )
    assert "Traceback" in kept.stderr  # for whoever debugs accel itself


def test_a_rank_stopped_by_ctrl_c_or_by_a_peer_says_so_in_one_line(monkeypatch):
    from accel.errors import plain_message

    assert plain_message(KeyboardInterrupt()) is None  # one process: Python's own
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert plain_message(KeyboardInterrupt()) == "rank 1 interrupted"
    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500\nmore")
    assert plain_message(gloo).startswith("rank 1 stopped: another rank ended in the middle of a collective ([..")
    assert "\n" not in plain_message(gloo)
    assert plain_message(ValueError("a bug")) is None  # a real error keeps its traceback


def test_the_engines_public_names_are_the_documented_calls():
    table = (ROOT / "docs" / "own-loop.md").read_text().split("## What each call does", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(?:step = )?eng\.(\w+)", table))
    public = {name for name in dir(accel.Engine) if not name.startswith("_")}
    assert public == documented and len(public) >= 14
