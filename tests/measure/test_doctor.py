"""`accel doctor`: the facts it collects, each speed trap on made-up machines, and the command's two outputs."""

from __future__ import annotations

import copy
import json

import pytest

from accel import devices
from accel.cli import main
from accel.devices import available_cpus
from accel.measure.doctor import collect, find_traps

CLEAN = {
    "versions": {
        "python": "3.11",
        "torch": "2.14.1",
        "torchvision": "0.29.1",
        "cuda": None,
        "cudnn": None,
        "nccl": None,
    },
    "device": "cpu (test cpu, 4 threads)",
    "cuda_available": False,
    "gpus": [],
    "cpu": {"model": "test cpu", "cores": 4, "usable_cores": 4, "memory_mb": 8000.0},
    "threads": {"torch": 4, "interop": 4},
    "env": {},
    "flags": {"cudnn_benchmark": False, "cudnn_deterministic": False, "deterministic_algorithms": False},
}


def machine(**changes) -> dict:
    """CLEAN with dotted-key changes, e.g. machine(**{"threads.torch": 8})."""
    info = copy.deepcopy(CLEAN)
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = info
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return info


def test_a_clean_machine_has_no_warnings():
    assert find_traps(CLEAN) == []
    assert find_traps(machine(recipe={"num_workers": "auto", "pin_memory": "auto"})) == []


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"threads.torch": 8}, "8 BLAS/OpenMP threads on 4 usable cores"),
        ({"threads.torch": 2, "recipe": {"num_workers": 3}}, "3 loader worker(s) + 2 compute threads on 4 cores"),
        (
            {"device": "cuda (H100)", "cuda_available": True, "recipe": {"num_workers": 6}},
            "6 loader worker(s) on 4 cores",
        ),
        ({"cpu.cores": 32, "cpu.usable_cores": 32, "threads.torch": 32}, "OMP_NUM_THREADS is unset on a 32-core"),
        ({"recipe": {"pin_memory": True}}, "pin_memory is true but there is no CUDA device"),
        ({"flags.cudnn_deterministic": True, "flags.cudnn_benchmark": True}, "deterministic mode and cudnn.benchmark"),
        ({"flags.deterministic_algorithms": True, "recipe": {"benchmark": True}}, "deterministic mode and cudnn.bench"),
        ({"versions.cuda": "13.0"}, "torch is a CUDA 13.0 build but no CUDA device or driver is usable"),
    ],
)
def test_each_trap_is_reported(changes, expected):
    said = find_traps(machine(**changes))
    assert len(said) == 1 and expected in said[0], said


def test_the_recipes_lint_ignore_silences_the_same_trap_in_doctor():
    oversubscribed = machine(**{"threads.torch": 2, "recipe": {"num_workers": 3}})
    assert len(find_traps(oversubscribed)) == 1
    oversubscribed["recipe"]["lint_ignore"] = ["workers-compete"]  # the code the speed lint gives it in a run
    assert find_traps(oversubscribed) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"threads.torch": 1, "recipe": {"num_workers": 3}},  # 1 + 3 threads on 4 cores: fits
        {"device": "cuda (H100)", "cuda_available": True, "recipe": {"num_workers": 3, "pin_memory": True}},
        {"cpu.cores": 32, "cpu.usable_cores": 32, "threads.torch": 8, "env": {"OMP_NUM_THREADS": "8"}},
        {"versions.cuda": "13.0", "cuda_available": True, "device": "cuda (H100)"},
        {"flags.cudnn_benchmark": True},
    ],
)
def test_near_misses_are_not_reported(changes):
    assert find_traps(machine(**changes)) == []


def test_collect_reports_this_machine():
    info = collect()
    assert info["versions"]["torch"] and info["versions"]["torchvision"]
    assert info["cpu"]["usable_cores"] == available_cpus() and info["threads"]["torch"] >= 1
    assert {"nvidia.dali", "torch_xla", "onnxruntime", "albumentations"} <= set(info["backends"])
    assert all(isinstance(b["installed"], bool) for b in info["backends"].values())
    assert info["blas"]["threadpools"] and all("num_threads" in p for p in info["blas"]["threadpools"])
    cuda_trap = any("CUDA" in w and "build" in w for w in info["warnings"])
    assert cuda_trap == (info["versions"]["cuda"] is not None and not info["cuda_available"])
    assert info["warnings"] == find_traps(info)
    assert "TFLOP/s (hardware: " in info["peaks"]["fp32"] or "TFLOP/s (measured: " in info["peaks"]["fp32"]


def test_doctor_json_and_table(capsys, monkeypatch, tiny, write_recipe):
    assert main(["doctor", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"versions", "device", "cpu", "threads", "blas", "env", "backends", "flags", "warnings"} <= set(info)

    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tiny["data"]["loader"] = {"pin_memory": True, "num_workers": available_cpus()}
    assert main(["doctor", str(write_recipe(tiny)), "--set", "name=checked"]) == 0
    out = capsys.readouterr().out
    assert "accel doctor" in out and "backends" in out and "OMP_NUM_THREADS" in out and "checked" in out
    assert "warning: data.loader.pin_memory is true" in " ".join(out.split())
    assert "loader worker(s) +" in " ".join(out.split())
