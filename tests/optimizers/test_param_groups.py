"""Parameter groups (issue 39): AdamW leaves 1-D parameters undecayed by default, `optim.groups` sets a learning
rate or weight decay by name pattern, and a checkpoint of an older accel (one group for every parameter) resumes:
each tensor keeps its optimizer state in its new group."""

from __future__ import annotations

import logging

import pytest
import torch
import yaml
from torch import nn

from accel.cli import main
from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.optimizers.builders import SGD, AdamW, Muon, build_optimizer
from accel.optimizers.muon import MuonWithAdamW, split_parameters
from accel.optimizers.muon_ns import DtypeMuon
from accel.optimizers.param_groups import regroup
from accel.runs.records import read_summary


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3))


def groups(optimizer) -> list[tuple[list[str], float, float]]:
    return [(g["param_names"], g["lr"], g["weight_decay"]) for g in optimizer.param_groups]


def test_adamw_decays_matrices_only_by_default_and_everything_with_decay_1d():
    assert groups(build_optimizer(AdamW.Config(lr=1e-3, weight_decay=0.1), model())) == [
        (["0.weight", "2.weight"], 1e-3, 0.1),
        (["0.bias", "1.weight", "1.bias", "2.bias"], 1e-3, 0.0),
    ]
    every = build_optimizer(AdamW.Config(lr=1e-3, weight_decay=0.1, decay_1d=True), model())
    assert groups(every) == [(["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"], 1e-3, 0.1)]
    sgd = build_optimizer(SGD.Config(lr=0.1, weight_decay=1e-4), model())  # SGD's L2 decay is unchanged
    assert len(sgd.param_groups) == 1 and sgd.param_groups[0]["weight_decay"] == 1e-4


def test_groups_by_name_pattern_take_their_own_settings_first_match_wins():
    cfg = AdamW.Config(
        lr=1e-3,
        weight_decay=0.1,
        groups=[{"params": ["2.*"], "lr": 1e-4}, {"params": ["0.*", "2.weight"], "weight_decay": 0.5}],
    )
    assert groups(build_optimizer(cfg, model())) == [
        (["1.weight", "1.bias"], 1e-3, 0.0),
        (["2.weight", "2.bias"], 1e-4, 0.1),
        (["0.weight", "0.bias"], 1e-3, 0.5),
    ]


def test_a_group_pattern_that_matches_nothing_is_an_error_naming_it():
    cfg = AdamW.Config(groups=[{"params": ["0.wieght"]}])
    with pytest.raises(AccelError, match=r"optim.groups\[0\].params: `0.wieght` matches no parameter.*`0.weight`"):
        build_optimizer(cfg, model())


def test_a_recipe_names_groups_and_a_typo_in_one_is_named(tiny):
    tiny["optim"] = {"name": "adamw", "groups": [{"params": ["fc.*"], "lr": 1e-4}]}
    assert validate_recipe(tiny).optim.groups[0].lr == 1e-4
    tiny["optim"]["groups"][0]["lrr"] = 1
    with pytest.raises(AccelError, match=r"`optim.groups.0.lrr` is not a valid key"):
        validate_recipe(tiny)


def _stepped(optimizer, net: nn.Module) -> None:
    for _ in range(2):
        net(torch.randn(5, 4)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def test_an_older_single_group_state_is_regrouped_by_name_keeping_every_tensors_state():
    old_net = model()
    old = torch.optim.AdamW(old_net.parameters(), lr=1e-3, weight_decay=0.1)  # what an older accel built
    _stepped(old, old_net)
    saved = old.state_dict()
    net = model()
    fresh = build_optimizer(AdamW.Config(lr=1e-3, weight_decay=0.1), net)
    order = [name for name, _ in net.named_parameters()]
    fresh.load_state_dict(regroup(saved, fresh, order, "last.pt"))
    before = dict(zip(order, old_net.parameters()))
    for name, param in net.named_parameters():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(fresh.state[param][key], old.state[before[name]][key]), (name, key)
    assert regroup(fresh.state_dict(), fresh, order, "last.pt") == fresh.state_dict()  # the same layout: as is


def test_an_older_accels_checkpoint_resumes_with_1d_parameters_undecayed(tiny, write_recipe, tmp_path, capsys, caplog):
    out = tmp_path / "run"
    tiny["optim"] = {"name": "adamw", "lr": 0.01, "weight_decay": 0.05, "decay_1d": True}
    tiny["train"]["epochs"] = 1
    assert main(["train", str(write_recipe(tiny)), "--out", str(out)]) == 0
    # what an older accel wrote: one group without names, and a recipe.yaml without decay_1d
    last = out / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    (group,) = state["optimizer"]["param_groups"]
    del group["param_names"]
    torch.save(state, last)
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    del recipe["optim"]["decay_1d"]
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    capsys.readouterr()
    caplog.set_level(logging.INFO, logger="accel")
    assert main(["train", str(out / "recipe.yaml"), "--out", str(out), "--resume", "--set", "train.epochs=2"]) == 0
    assert "the optimizer's parameter groups differ from this recipe's" in caplog.text
    assert "optim.weight_decay 0.05 -> 0.0" in caplog.text
    resumed = torch.load(last, weights_only=True)["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in resumed] == [0.05, 0.0]
    assert all(name.endswith(".weight") for name in resumed[0]["param_names"])
    assert read_summary(out / "summary.json").status == "completed"


def test_muons_adamw_part_leaves_1d_parameters_undecayed_and_an_older_muon_state_is_regrouped():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), nn.LayerNorm(8))
    cfg = Muon.Config(lr=1e-2, weight_decay=0.1, muon_params=["1.*.weight"])
    fresh = build_optimizer(cfg, net)
    assert [(g["param_names"], g["weight_decay"]) for g in fresh.param_groups] == [
        (["1.0.weight", "1.1.weight"], 0.1),
        (["0.weight"], 0.1),
        (["0.bias", "1.0.bias", "1.1.bias", "2.weight", "2.bias"], 0.0),
    ]
    # what an older accel built: Muon on plain tensors, then one AdamW group for every other parameter
    on_muon, on_adamw = split_parameters(net, cfg.muon_params, cfg.adamw_params)
    old = MuonWithAdamW(
        [
            DtypeMuon([p for _, p in on_muon], torch.float32, lr=1e-2, weight_decay=0.1),
            torch.optim.AdamW([p for _, p in on_adamw], lr=1e-2, weight_decay=0.1),
        ]
    )
    _stepped(old, net)
    order = [name for name, _ in net.named_parameters()]
    fresh.load_state_dict(regroup(old.state_dict(), fresh, order, "last.pt"))
    for name, param in net.named_parameters():
        assert fresh.state[param].keys() == old.state[param].keys() and fresh.state[param], name
        for key, value in old.state[param].items():
            assert torch.equal(fresh.state[param][key], value), (name, key)


def test_a_resolved_adamw_recipe_switches_to_muon_whose_groups_set_adamws_part(tiny):
    """`accel tune` and `--vary optim.name=adamw,muon` change the name of a resolved recipe, which holds every
    adamw key (groups and decay_1d among them): muon must take them."""
    tiny["optim"] = {"name": "adamw"}
    resolved = validate_recipe(tiny).dump()
    resolved["optim"]["name"] = "muon"
    assert validate_recipe(resolved).optim.groups == []
    net = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), nn.LayerNorm(8))
    cfg = Muon.Config(lr=1e-2, muon_params=["1.*.weight"], groups=[{"params": ["1.*"], "lr": 1e-3}])
    assert [(g["param_names"], g["lr"]) for g in build_optimizer(cfg, net).param_groups] == [
        (["1.0.weight", "1.1.weight"], 1e-2),  # Muon's matrices keep optim's settings
        (["0.weight"], 1e-2),
        (["0.bias", "2.weight", "2.bias"], 1e-2),
        (["1.0.bias", "1.1.bias"], 1e-3),
    ]
