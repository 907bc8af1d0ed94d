"""accel/measure/anatomy.py on its own: the model's forward and its parts become ranges, and the segments tile the
time."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.profiler import profile

from accel.measure.anatomy import Anatomy


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_a_module_lists_members_stand_for_it_and_phases_nest_into_flat_segments():
    net, anatomy = Net(), Anatomy()
    with profile() as prof:
        start = anatomy.start(net, net)
        with anatomy.phase("loss"):
            net(torch.ones(3, 4)).sum()
        end = anatomy.stop()
    names = {event.name for event in prof.events()}
    assert {"accel/loss", "accel/forward", "accel/module/head (Linear)"} <= names
    assert {"accel/module/blocks.0 (Linear)", "accel/module/blocks.1 (Linear)"} <= names
    phases = [segment.phase for segment in anatomy.segments]
    assert phases == ["other", "loss", "forward", "loss", "other"]
    assert anatomy.segments[0].start == start and anatomy.segments[-1].end == end
    assert all(a.end == b.start for a, b in zip(anatomy.segments, anatomy.segments[1:]))
    assert not net._forward_hooks and not net.head._forward_pre_hooks


@pytest.mark.parametrize("in_place", [False, True])
def test_no_model_to_hook_times_the_phases_without_ranges(in_place):
    # no model found (the window opened with None and the script's step crashed in accel's hook code), or one
    # compiled in place, whose hooks run inside its compiled call: a hook added there would recompile it
    model = torch.nn.Linear(2, 2) if in_place else None
    if in_place:
        model.compile(backend="eager")
    anatomy = Anatomy()
    anatomy.start(model, model)
    assert model is None or not (model._forward_pre_hooks or model._forward_hooks)
    with anatomy.phase("backward"):
        pass
    anatomy.stop()
    assert [segment.phase for segment in anatomy.segments] == ["other", "backward", "other"]
