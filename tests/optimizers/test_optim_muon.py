"""`optim: {name: muon}`: which parameters Muon takes, that its step really is Muon's (orthogonalised), and that
the one-optimizer composite keeps every contract the trainer relies on: schedules, GradScaler, checkpoints,
resume with edited settings, the recipe and CLI path."""

from __future__ import annotations

import copy
import logging
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from speedups.test_contract import StopAt
from torch import nn

from accel import devices
from accel.cli import main
from accel.config.recipe import validate_recipe
from accel.errors import AccelError, CheckpointError, RecipeError
from accel.models.gpt import gpt
from accel.models.vision import small_cnn
from accel.optimizers import muon_ns
from accel.optimizers.builders import AdamW, Muon, build_optimizer, build_scheduler
from accel.optimizers.muon_ns import DTYPES, DtypeMuon, orthogonalise
from accel.runs.records import read_summary
from accel.runs.resume import apply_recipe_values, optimizer_changes
from accel.speedups.optim import choose_impl
from accel.train.run import build_trainer
from conftest import finish, run_cli
from tests.strategy.test_distributed import _train

HIDDEN = ("attn.qkv.weight", "attn.proj.weight", "mlp.0.weight", "mlp.2.weight")


def tiny_gpt(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return gpt(vocab_size=32, context=8, width=16, depth=2, heads=2)


def muon(model: nn.Module, **options) -> torch.optim.Optimizer:
    return build_optimizer(Muon.Config(**options), model)


def names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[set[str]]:
    """The parameter names of the Muon part and of the AdamW part."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [{name_of[id(p)] for g in part.param_groups for p in g["params"]} for part in optimizer.parts]


def lm_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int = 1) -> None:
    torch.manual_seed(seed)
    tokens = torch.randint(0, 32, (4, 9))
    logits = model(tokens[:, :-1])
    nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_gpt_hidden_matrices_go_to_muon_embeddings_head_and_norms_to_adamw(caplog):
    model = tiny_gpt()
    with caplog.at_level(logging.INFO, logger="accel"):
        on_muon, on_adamw = names(model, muon(model))
    assert on_muon == {f"blocks.{i}.{name}" for i in range(2) for name in HIDDEN}
    # the head shares the embedding's weight: one tensor, on AdamW
    assert on_adamw == {n for n, _ in model.named_parameters()} - on_muon
    assert {"embed.weight", "position", "norm.weight", "blocks.0.norm1.bias"} <= on_adamw
    assert "muon: 8 matrices (6,144 parameters) on Muon, 12 tensors (800 parameters) on AdamW" in caplog.text


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 16)
        self.hidden = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.out = nn.Linear(16, 2)


def test_an_mlp_hidden_layers_weights_go_to_muon_their_biases_to_adamw():
    model = MLP()
    on_muon, on_adamw = names(model, muon(model))
    assert on_muon == {f"hidden.{i}.weight" for i in range(3)}
    assert {f"hidden.{i}.bias" for i in range(3)} | {"inp.weight", "out.weight"} <= on_adamw


def test_patterns_choose_and_exclude_by_name():
    model = MLP()
    on_muon, _ = names(model, muon(model, muon_params=["inp.weight", "hidden.*"], adamw_params=["hidden.2.*"]))
    assert on_muon == {"inp.weight", "hidden.0.weight", "hidden.1.weight"}


@pytest.mark.parametrize(
    ("options", "key", "hint"),
    [
        ({"muon_params": ["hiden.*"]}, "optim.muon_params", "`hiden.*` matches no matrix"),
        ({"adamw_params": ["out.weigth"]}, "optim.adamw_params", "did you mean `out.weight`?"),
        ({"muon_params": ["hidden.0.bias"]}, "optim.muon_params", "matches no matrix"),  # 1-D: never Muon's
    ],
)
def test_a_pattern_that_selects_nothing_is_an_error_naming_its_key(options, key, hint):
    with pytest.raises(AccelError) as err:
        muon(MLP(), **options)
    assert str(err.value).startswith(f"{key}: ") and hint in str(err.value)


def test_a_model_without_repeated_blocks_or_without_matrices_in_them_is_refused_with_what_to_do():
    with pytest.raises(AccelError, match="has no repeated blocks .* optim.muon_params") as err:
        muon(small_cnn(4))
    assert "optim.name: adamw" in str(err.value)
    # a ResNet's blocks (torchvision's layer1..4) hold convolutions: torch's Muon takes matrices only, and the
    # first message says so, suggesting no pattern (one would match no matrix either)
    resnet = pytest.importorskip("torchvision.models").resnet18(num_classes=10)
    with pytest.raises(AccelError) as first:
        muon(resnet)
    message = str(first.value)
    assert "hold convolution filters (" in message and "`layer1.0.conv1.weight` [64, 64, 3, 3]" in message
    assert "orthogonalises 2-D matrices only" in message and "airbench's Muon flattens each filter" in message
    assert "no optim.muon_params pattern can give them to Muon" in message and "optim.name: adamw" in message
    with pytest.raises(AccelError) as pattern:
        muon(resnet, muon_params=["layer1.*"])
    assert str(pattern.value).startswith("optim.muon_params: `layer1.*` matches no matrix; what it matches includes")
    assert "convolution filters" in str(pattern.value)


def test_muon_changes_the_hidden_matrices_step_and_adamw_steps_the_rest_exactly_as_adamw_does():
    options = {"lr": 1e-2, "weight_decay": 0.0}
    a, b = tiny_gpt(), tiny_gpt()
    lm_step(a, muon(a, **options))
    lm_step(b, build_optimizer(AdamW.Config(**options), b))
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        hidden = name.endswith(HIDDEN)
        assert torch.equal(p, q) != hidden, name


@pytest.mark.parametrize("ns_dtype", ["bfloat16", "float32"])
def test_the_update_of_a_hidden_matrix_is_orthogonalised(ns_dtype):
    model = MLP()
    before = model.hidden[1].weight.detach().clone()
    optimizer = muon(model, lr=1e-2, weight_decay=0.0, ns_dtype=ns_dtype)
    torch.manual_seed(0)
    model.hidden[1](torch.randn(64, 16)).pow(2).sum().backward()
    gradient = model.hidden[1].weight.grad.clone()
    optimizer.step()
    step = (before - model.hidden[1].weight.detach()) / (1e-2 * 0.2 * 16**0.5)  # match_rms_adamw's lr scale
    spread = torch.linalg.svdvals(step.double())
    # Newton-Schulz maps every singular value into about [0.5, 1.5] (torch's docstring); the gradient's own are
    # far apart, so this is the orthogonalisation at work, not a property of the gradient
    assert spread.min() > 0.4 and spread.max() < 1.6, spread
    raw = torch.linalg.svdvals(gradient.double())
    assert raw.max() / raw.min() > 10 * spread.max() / spread.min()


def test_float32_follows_the_newton_schulz_iteration_far_closer_than_bf16():
    torch.manual_seed(0)
    update = torch.randn(48, 16)
    args = ((3.4445, -4.7750, 2.0315), 5, 1e-7)
    exact = orthogonalise(update.double(), torch.float64, *args)
    error = {dtype: (orthogonalise(update, dtype, *args) - exact).abs().max() for dtype in DTYPES.values()}
    assert error[torch.float32] < 1e-4 and error[torch.bfloat16] > 1e-3
    assert error[torch.float32] < error[torch.bfloat16] / 100
    spread = torch.linalg.svdvals(orthogonalise(update, torch.float32, *args).double())
    assert spread.min() > 0.4 and spread.max() < 1.6, spread


@pytest.mark.parametrize("nesterov", [True, False])
def test_in_bfloat16_the_step_is_torchs_muon_to_the_bit(nesterov):
    torch.manual_seed(0)
    ours, theirs = (nn.Parameter(w) for w in torch.randn(48, 16).repeat(2, 1, 1))
    options = {"lr": 1e-2, "weight_decay": 0.1, "nesterov": nesterov, "adjust_lr_fn": "match_rms_adamw"}
    mine = DtypeMuon([ours], torch.bfloat16, **options)
    torch_muon = torch.optim.Muon([theirs], **options)
    for _ in range(3):
        ours.grad = torch.randn(48, 16)
        theirs.grad = ours.grad.clone()
        mine.step()
        torch_muon.step()
    assert torch.equal(ours, theirs)
    assert mine.state_dict()["state"][0].keys() == torch_muon.state_dict()["state"][0].keys()
    assert torch.equal(mine.state[ours]["momentum_buffer"], torch_muon.state[theirs]["momentum_buffer"])


def test_in_float32_the_momentum_is_torchs_and_only_the_orthogonalisation_differs():
    torch.manual_seed(0)
    ours, theirs = (nn.Parameter(w) for w in torch.randn(48, 16).repeat(2, 1, 1))
    mine = DtypeMuon([ours], torch.float32, lr=1e-2, nesterov=False)  # no Nesterov: the update is the buffer
    torch_muon = torch.optim.Muon([theirs], lr=1e-2, nesterov=False)
    for _ in range(2):
        ours.grad = torch.randn(48, 16)
        theirs.grad = ours.grad.clone()
        mine.step()
        torch_muon.step()
    assert torch.equal(mine.state[ours]["momentum_buffer"], torch_muon.state[theirs]["momentum_buffer"])
    assert not torch.equal(ours, theirs)
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=0)  # bf16's rounding of a 1e-2 step


@pytest.mark.parametrize("schedule", [{"name": "onecycle"}, {"name": "cosine", "warmup_steps": 2}])
def test_a_schedule_moves_both_parts_learning_rates(schedule):
    model = tiny_gpt()
    optimizer = muon(model, lr=1e-2)
    cfg = validate_recipe({**TINY_LM, "schedule": schedule}).schedule
    scheduler = build_scheduler(cfg, optimizer, total_steps=10, steps_per_epoch=10)
    seen = []
    for _ in range(4):
        lm_step(model, optimizer)
        scheduler.step()
        seen.append([g["lr"] for part in optimizer.parts for g in part.param_groups])
    assert all(len(set(lrs)) == 1 for lrs in seen)  # Muon's group and AdamW's follow one schedule
    assert len({lrs[0] for lrs in seen}) == 4  # and it moves


def test_fp16_grad_scaler_unscales_clips_and_steps_both_parts():
    model, reference = tiny_gpt(), tiny_gpt()
    optimizer, plain = muon(model), muon(reference)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    tokens = torch.randint(0, 32, (4, 9))
    for net in (model, reference):
        loss = nn.functional.cross_entropy(net(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        (scaler.scale(loss) if net is model else loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    scaler.step(optimizer)
    plain.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_state_dict_round_trips_and_training_continues_exactly():
    whole, split = tiny_gpt(), tiny_gpt()
    first, second = muon(whole, lr=1e-2), muon(split, lr=1e-2)
    for step in range(3):
        lm_step(whole, first, seed=step)
        lm_step(split, second, seed=step)
    saved = copy.deepcopy(second.state_dict())
    resumed = muon(split, lr=1e-2)
    resumed.load_state_dict(saved)
    assert resumed.parts[0].state is resumed.state and resumed.parts[1].param_groups[0] is resumed.param_groups[1]
    for step in range(3, 5):
        lm_step(whole, first, seed=step)
        lm_step(split, resumed, seed=step)
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), split.parameters()))


def test_a_checkpoint_of_another_split_is_refused_naming_the_settings():
    model = MLP()
    saved = muon(model).state_dict()
    with pytest.raises(CheckpointError, match="optim.muon_params, optim.adamw_params"):
        muon(model, adamw_params=["hidden.0.weight"]).load_state_dict(saved)


def test_a_resume_applies_edited_settings_to_the_groups_that_hold_them():
    model = MLP()
    saved = muon(model).state_dict()
    edited = muon(model, momentum=0.9, eps=1e-6)
    changes = optimizer_changes(edited, saved, Muon.Config(momentum=0.9, eps=1e-6), False, Path("last.pt"))
    edited.load_state_dict(saved)
    apply_recipe_values(edited, changes)
    muon_group, *adamw_groups = edited.param_groups  # AdamW's: matrices, then 1-D parameters (undecayed)
    assert muon_group["momentum"] == 0.9 and not any("momentum" in group for group in adamw_groups)
    assert all(group["eps"] == 1e-6 for group in adamw_groups)
    assert muon_group["eps"] == 1e-7  # Muon's own eps (Newton-Schulz) untouched


def test_the_optim_speedup_keeps_torchs_implementation():
    assert choose_impl(muon(MLP()), "auto") is None  # torch's Muon has no fused or foreach kernel


def test_auto_orthogonalises_each_shape_in_the_dtype_measured_faster_and_in_float32_where_bf16_is_emulated(
    monkeypatch, caplog
):
    monkeypatch.setattr(muon_ns, "faster_on_cpu", lambda rows, cols, threads: torch.float32)
    with caplog.at_level(logging.INFO, logger="accel"):
        assert muon(MLP()).parts[0].ns_dtype == {(16, 16): torch.float32}  # the tests' CPU counts as native
        assert "Newton-Schulz in float32 at 16 x 16 (measured the faster on this CPU)" in caplog.text
        monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
        assert muon(MLP()).parts[0].ns_dtype == {(16, 16): torch.float32}
        assert "Newton-Schulz in float32 (bf16 is emulated on this CPU)" in caplog.text
        assert muon(MLP(), ns_dtype="bfloat16").parts[0].ns_dtype == {(16, 16): torch.bfloat16}  # asked for


def test_every_rank_of_a_distributed_run_takes_rank_0s_measurement(monkeypatch):
    rank0 = {(16, 16): torch.bfloat16}
    monkeypatch.setattr(muon_ns, "faster_on_cpu", lambda rows, cols, threads: torch.float32)  # this rank's own
    monkeypatch.setattr(muon_ns.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(muon_ns.dist, "get_world_size", lambda: 2)
    sent = []

    def broadcast(box, src):
        sent.append((dict(box[0]), src))
        box[0] = rank0

    monkeypatch.setattr(muon_ns.dist, "broadcast_object_list", broadcast)
    assert muon(MLP()).parts[0].ns_dtype == rank0
    assert sent == [({(16, 16): torch.float32}, 0)]


def test_the_measurement_picks_one_of_the_two_leaves_the_runs_random_stream_and_skips_large_matrices(monkeypatch):
    muon_ns.faster_on_cpu.cache_clear()
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    assert muon_ns.faster_on_cpu(16, 48, torch.get_num_threads()) in (torch.bfloat16, torch.float32)
    assert torch.equal(torch.rand(3), expected)  # its own generator
    monkeypatch.setattr(muon_ns, "orthogonalise", lambda *a: pytest.fail("a large matrix is not measured"))
    assert muon_ns.faster_on_cpu(1024, 1025, 1) == torch.bfloat16


def test_each_shape_steps_in_its_own_dtype():
    torch.manual_seed(0)
    wide, square = torch.randn(16, 48), torch.randn(16, 16)
    grads = [torch.randn(16, 48), torch.randn(16, 16)]

    def stepped(ns_dtype) -> list[torch.Tensor]:
        params = [nn.Parameter(wide.clone()), nn.Parameter(square.clone())]
        for param, grad in zip(params, grads):
            param.grad = grad.clone()
        DtypeMuon(params, ns_dtype, lr=1e-2).step()
        return params

    mixed = stepped({(16, 48): torch.float32, (16, 16): torch.bfloat16})
    assert torch.equal(mixed[0], stepped(torch.float32)[0]) and torch.equal(mixed[1], stepped(torch.bfloat16)[1])
    assert not torch.equal(mixed[0], stepped(torch.bfloat16)[0])


def test_the_ns_dtype_key_validates_and_a_wrong_value_names_it():
    assert validate_recipe({**TINY_LM, "optim": {"name": "muon", "ns_dtype": "float32"}}).optim.ns_dtype == "float32"
    with pytest.raises(RecipeError, match="optim.ns_dtype"):
        validate_recipe({**TINY_LM, "optim": {"name": "muon", "ns_dtype": "fp32"}})


def test_a_sharded_model_is_refused():
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = fully_shard(MLP())
        with pytest.raises(AccelError, match="FSDP2's sharded .* strategy: ddp"):
            muon(model)
    finally:
        dist.destroy_process_group()


# ---- the recipe path -----------------------------------------------------------------------------------------

TINY_LM = {
    "name": "lm-muon",
    "seed": 0,
    "task": "language_model",
    "device": "cpu",
    "model": {"name": "gpt", "args": {"width": 16, "depth": 2, "heads": 2}},
    "data": {"dataset": {"name": "text_files", "root": "corpus", "context": 16}, "batch_size": 8},
    "optim": {"name": "muon", "lr": 3e-3},
    "schedule": {"name": "onecycle"},
    "train": {"max_steps": 6, "clip_grad_norm": 1.0},
    "log": {"progress": False, "tensorboard": False, "every_steps": 2},
}


@pytest.fixture
def lm(tmp_path) -> dict:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "textwrap.py").write_text(Path(textwrap.__file__).read_text()[:6000])
    recipe = copy.deepcopy(TINY_LM)
    recipe["data"]["dataset"]["root"] = str(corpus)
    return recipe


def test_a_muon_run_resumes_to_exactly_the_uninterrupted_run(lm):
    recipe = validate_recipe(lm)
    whole = build_trainer(recipe)
    whole.fit()
    first = build_trainer(recipe)
    first.callbacks.append(StopAt(3))
    assert first.fit()["status"] == "interrupted"
    resumed = build_trainer(recipe)
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    assert resumed.step == whole.step == 6
    assert all(torch.equal(p, q) for p, q in zip(whole.module.parameters(), resumed.module.parameters()))


def test_the_cli_trains_a_muon_recipe(lm, tmp_path, caplog):
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump({**lm, "optim": {"name": "adamw", "lr": 3e-3}}))
    with caplog.at_level(logging.INFO, logger="accel"):
        assert main(["train", str(path), "--out", str(tmp_path / "run"), "--set", "optim.name=muon"]) == 0
    summary = read_summary(tmp_path / "run" / "summary.json")
    assert summary.steps == 6 and summary.metrics["val_loss"] < 10
    assert "muon: 8 matrices" in caplog.text
    assert yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text())["optim"]["momentum"] == 0.95


@pytest.mark.slow
def test_two_processes_train_muon_as_one_does(lm, tmp_path):
    # DDP all-reduces the gradients before the step, so each process's Muon sees the one-process gradient. Not
    # to the last bit: the all-reduce rounds differently, and Newton-Schulz runs in bf16 (2**-8 relative)
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(lm))
    two = _train(path, tmp_path / "two", "--nproc", "2")
    one = run_cli("train", path, "--out", tmp_path / "one", "--set", "data.batch_size=16")
    _, err = finish(two)
    assert two.returncode == 0, err
    assert one.returncode == 0, one.stderr
    a, b = (read_summary(tmp_path / run / "summary.json") for run in ("two", "one"))
    assert a.steps == b.steps == 6
    for key in ("train_loss", "val_loss"):
        assert a.metrics[key] == pytest.approx(b.metrics[key], rel=1e-3), key


def test_a_muon_checkpoint_on_disk_resumes_with_an_edited_momentum(lm, tmp_path, caplog):
    path, out = tmp_path / "lm.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump({**lm, "schedule": {"name": "none"}, "train": {"max_steps": 3}}))
    assert main(["train", str(path), "--out", str(out)]) == 0
    with caplog.at_level(logging.INFO, logger="accel"):
        more = ["--set", "train.max_steps=5", "--set", "optim.momentum=0.9"]
        assert main(["train", str(path), "--out", str(out), "--resume", *more]) == 0
    assert "optim.momentum 0.95 -> 0.9" in caplog.text
    groups = torch.load(out / "checkpoints" / "last.pt", weights_only=True)["optimizer"]["param_groups"]
    assert groups[0]["momentum"] == 0.9 and "momentum" not in groups[1]
    assert read_summary(out / "summary.json").steps == 5
