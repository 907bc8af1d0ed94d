"""`accel.Engine(optimizer="muon")` (or `ACCEL_SET="optimizer=muon"`): Muon on the hidden matrices and AdamW on
the rest, built at setup from the loop's own optimizer's groups, learning rates and weight decay; never by
default."""

from __future__ import annotations

import pytest
import torch

import accel
from accel.errors import AccelError, RecipeError
from accel.optimizers.muon import MuonWithAdamW
from tests.optimizers.test_optim_muon import HIDDEN, lm_step, tiny_gpt


def groups_by_name(model, optimizer):
    """Each part's groups as (sorted parameter names, lr, weight decay)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    return [
        [(sorted(name_of[id(p)] for p in g["params"]), g["lr"], g["weight_decay"]) for g in part.param_groups]
        for part in optimizer.parts
    ]


def two_groups(model):
    """A loop's usual optimizer: matrices decayed at one rate, the rest undecayed at another."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0, "lr": 2e-3}]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-7)


def test_muon_takes_the_block_matrices_with_the_loops_groups_lr_and_weight_decay():
    model = tiny_gpt()
    eng = accel.Engine(device="cpu", optimizer="muon")
    wrapped, optimizer = eng.setup(model, two_groups(model))
    real = eng._core.optimizer
    assert isinstance(real, MuonWithAdamW) and isinstance(optimizer, MuonWithAdamW)
    muon_groups, adamw_groups = groups_by_name(model, real)
    matrices = sorted(n for n, p in model.named_parameters() if n.startswith("blocks.") and n.endswith(HIDDEN))
    assert muon_groups == [(matrices, 1e-3, 0.1)]  # the decayed group's share; the other group has no matrix
    decayed_rest = sorted(n for n, p in model.named_parameters() if p.ndim >= 2 and n not in matrices)
    undecayed = sorted(n for n, p in model.named_parameters() if p.ndim < 2)
    assert adamw_groups == [(decayed_rest, 1e-3, 0.1), (undecayed, 2e-3, 0.0)]
    assert all(g["betas"] == (0.9, 0.95) and g["eps"] == 1e-7 for g in real.parts[1].param_groups)
    assert real.parts[0].param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lm_step(wrapped, optimizer)  # the loop's optimizer.step() steps both parts
    assert all(not torch.equal(before[n], p) for n, p in model.named_parameters())
    for group in optimizer.param_groups:  # a loop's schedule reaches both parts
        group["lr"] = 5e-4
    assert {g["lr"] for part in real.parts for g in part.param_groups} == {5e-4}


def test_muon_only_when_a_setting_asks(monkeypatch):
    model = tiny_gpt()
    eng = accel.Engine(device="cpu")
    _, optimizer = eng.setup(model, two_groups(model))
    assert type(eng._core.optimizer) is torch.optim.AdamW
    monkeypatch.setenv("ACCEL_SET", "optimizer=muon")
    model = tiny_gpt()
    eng = accel.Engine(device="cpu")
    eng.setup(model, two_groups(model))
    assert isinstance(eng._core.optimizer, MuonWithAdamW)


def test_an_unknown_optimizer_setting_and_a_model_without_blocks_are_refused():
    with pytest.raises(RecipeError, match="`optimizer` = 'lion': muon"):
        accel.Engine(device="cpu", optimizer="lion")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with pytest.raises(AccelError, match="no repeated blocks"):
        accel.Engine(device="cpu", optimizer="muon").setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
