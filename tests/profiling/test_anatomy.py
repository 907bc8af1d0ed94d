"""accel/measure/anatomy.py on its own: the model's forward and its parts become ranges, and the segments tile the
time."""

from __future__ import annotations

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


def test_no_model_to_hook_times_the_phases_without_ranges():
    # an unchanged script's model compiled in place is left unhooked (the recorder finds none): the window opened
    # with model None and the script's step crashed in accel's hook code
    anatomy = Anatomy()
    anatomy.start(None, None)
    with anatomy.phase("backward"):
        pass
    anatomy.stop()
    assert [segment.phase for segment in anatomy.segments] == ["other", "backward", "other"]
