"""The speed lint: each trap set up (for real where a CPU can, else as made-up facts), found with its fix."""

from __future__ import annotations

import re
import time
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from accel import Trainer
from accel.config.recipe import load_recipe
from accel.errors import AccelError
from accel.measure import lint
from accel.measure.traps import codes
from accel.speedups.channels_last import ChannelsLast
from accel.speedups.jit import Jit
from accel.train.run import build_trainer
from conftest import cuda_only

CLEAN = {
    "device": "cpu",
    "cores": 2,
    "torch_threads": 2,
    "blas_threads": 2,
    "workers": 0,
    "pin_memory": False,
    "in_memory": False,
    "anomaly_detection": False,
    "deterministic": False,
    "optimizer": "AdamW",
    "fused": False,
    "fused_exists": True,
    "needless": {},
    "amp": False,
    "fast_bf16": False,
}


def _codes(found: list[lint.Finding]) -> list[str]:
    return [f.code for f in found]


def _fit(model: nn.Module | None = None, loader=None, **kwargs) -> dict:
    torch.manual_seed(0)
    model = model or nn.Sequential(nn.Flatten(), nn.Linear(8, 4))
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loader or DataLoader(data, batch_size=8),
        device="cpu",
        **kwargs,
    )
    return trainer.fit()


def _found(summary: dict) -> dict[str, dict]:
    return {f["code"]: f for f in summary["lint"]}


def test_a_clean_setup_has_no_findings():
    assert lint.findings(CLEAN) == []
    assert lint.findings(CLEAN, {"data_wait_fraction": 0.01, "epochs": 3}) == []


def test_anomaly_detection_is_found_with_its_fix():
    torch.autograd.set_detect_anomaly(True)
    try:
        found = _found(_fit())
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert "set_detect_anomaly(False)" in found["anomaly-detection"]["fix"]


def test_deterministic_algorithms_are_found():
    torch.use_deterministic_algorithms(True)
    try:
        found = _found(_fit())
    finally:
        torch.use_deterministic_algorithms(False)
    assert "use_deterministic_algorithms(False)" in found["deterministic"]["fix"]


def test_channels_last_on_a_model_without_convolutions_is_found():
    found = _found(_fit(speedups=[ChannelsLast()]))
    assert "remove `speedups.channels_last`" in found["channels-last-without-conv"]["fix"]
    conv = nn.Sequential(nn.Unflatten(1, (2, 2, 2)), nn.Conv2d(2, 4, 1), nn.Flatten(), nn.Linear(16, 4))
    assert "channels-last-without-conv" not in _found(_fit(conv, speedups=[ChannelsLast()]))


def test_threads_over_the_cores_are_found(monkeypatch):
    monkeypatch.setattr(lint, "available_cpus", lambda: 1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        found = _found(_fit())
    finally:
        torch.set_num_threads(before)
    assert "OMP_NUM_THREADS=1" in found["threads-over-cores"]["fix"]


def test_workers_competing_with_compute_are_found(monkeypatch):
    monkeypatch.setattr(lint, "available_cpus", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    data = TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,)))
    try:
        found = _found(_fit(loader=DataLoader(data, batch_size=8, num_workers=1)))
    finally:
        torch.set_num_threads(before)
    assert "num_workers: 0" in found["workers-compete"]["fix"]
    # Compute on a GPU leaves the cores to the workers: no finding.
    assert lint.findings(CLEAN | {"device": "cuda", "workers": 1, "pin_memory": True, "fused": True}) == []


def test_more_cpu_processes_than_cores_are_found(monkeypatch):
    found = lint.findings(CLEAN | {"processes": 4})  # `accel train --nproc 4` on 2 cores
    assert [(f.code, f.fix) for f in found] == [
        (
            "processes-over-cores",
            "--nproc 2 or fewer (on a CPU, fewer processes with more threads each are usually faster).",
        )
    ]
    assert found[0].found.startswith("4 training processes on 2 usable cores")
    assert lint.findings(CLEAN | {"processes": 2}) == []
    assert lint.findings(CLEAN | {"processes": 4, "device": "cuda", "pin_memory": True, "fused": True}) == []
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")  # what torchrun tells each process it starts
    monkeypatch.setattr(lint, "available_cpus", lambda: 2)
    assert "processes-over-cores" in _found(_fit())


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        time.sleep(0.01)  # a decode the single main process waits for
        return torch.randn(8), i % 4


def test_data_wait_with_few_workers_is_found_at_the_end():
    found = _found(_fit(loader=DataLoader(SlowDataset(), batch_size=4)))
    assert "waited for batches with 0 loader worker(s)" in found["data-wait"]["found"]
    assert "num_workers" in found["data-wait"]["fix"]
    assert lint.findings(CLEAN | {"in_memory": True}, {"data_wait_fraction": 0.5}) == []  # workers cannot help


@pytest.mark.parametrize(
    "change, code",
    [
        ({"device": "cuda", "pin_memory": False, "fused": True}, "pin-memory-off"),
        ({"device": "cuda", "pin_memory": True, "fused": False}, "optimizer-not-fused"),
        ({"fast_bf16": True}, "fp32-with-fast-bf16"),
    ],
)
def test_gpu_and_matrix_unit_traps_on_made_up_machines(change, code):
    assert _codes(lint.findings(CLEAN | change)) == [code]
    assert lint.findings(CLEAN | change | {"amp": True, "pin_memory": True, "fused": True}) == []


def test_the_bf16_finding_states_the_speed_measured_at_the_models_size_or_no_number():
    (found,) = lint.findings(CLEAN | {"fast_bf16": True, "bf16_matmul_speedup": 1.7})
    assert "measured 1.7x fp32's speed" in found.found
    assert lint.findings(CLEAN | {"fast_bf16": True, "bf16_matmul_speedup": 0.9}) == []  # narrow layers: no trap
    (unmeasured,) = lint.findings(CLEAN | {"fast_bf16": True})
    assert "not measured" in unmeasured.found and not re.search(r"\d+(\.\d+)?x|several", unmeasured.found)


def test_the_lint_measures_bf16_with_the_profiles_probe_at_the_models_largest_layer_once(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCEL_PEAKS_CACHE", str(tmp_path / "peaks.json"))
    probed = []
    monkeypatch.setattr(lint, "_fast_bf16", lambda device: True)
    monkeypatch.setattr(lint.peaks, "bf16_matmul_speedup", lambda k, n, device: probed.append((k, n)) or 2.5)
    for _ in range(2):  # the second run reads the figure: a probe at every run's start slowed each run on AMX
        found = _found(_fit(model=nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.Linear(16, 4))))
        assert probed == [(8, 16)] and "measured 2.5x" in found["fp32-with-fast-bf16"]["found"]
    from accel.config.train_config import TrainConfig

    _fit(config=TrainConfig(lint_ignore=["fp32-with-fast-bf16"]))
    assert len(probed) == 1  # an ignored finding costs no probe
    lint.peaks.bf16_speedup_at_model_size(nn.Linear(16, 50_000), torch.device("cpu"))
    assert probed[-1] == (16, lint.peaks.PROBE_DIM_AT_MOST)  # a vocabulary's head: the probe's tensors bounded


@pytest.mark.parametrize(
    "change, code, said",
    [
        ({"device": "cuda", "pin_memory": False, "fused": True}, "pin-memory-off", "DataLoader(..., pin_memory=True)"),
        ({"device": "cuda", "pin_memory": True, "fused": False}, "optimizer-not-fused", "AdamW(..., fused=True)"),
        ({"fast_bf16": True}, "fp32-with-fast-bf16", "torch.autocast("),
        ({"torch_threads": 4}, "threads-over-cores", "torch.set_num_threads(2)"),
        ({"processes": 4}, "processes-over-cores", "torchrun --nproc_per_node 2"),
    ],
)
def test_a_scripts_findings_say_their_fixes_in_its_own_code_not_in_recipe_keys(change, code, said):
    # an unchanged script (accel's instrument): no recipe, no engine, so no `speedups:` or `data.loader` to set
    (found,) = lint.findings(CLEAN | change | {"script": "plain"})
    assert found.code == code and said in found.fix and "speedups" not in found.fix and "data.loader" not in found.fix


def test_a_scripts_fix_names_its_own_frameworks_setting_and_no_other():
    fp32 = CLEAN | {"fast_bf16": True, "amp": False, "bf16_matmul_speedup": 3.4}
    said = {where: lint.findings(fp32 | {"script": where})[0].fix for where in ("plain", "hf", "lightning")}
    assert "torch.autocast" in said["plain"] and "Trainer" not in said["plain"] and "Lightning" not in said["plain"]
    assert "Trainer's --bf16)" in said["hf"] and "Lightning" not in said["hf"]
    assert "Lightning's precision='bf16-mixed')" in said["lightning"] and "Trainer" not in said["lightning"]


def test_recompiling_every_epoch_is_found():
    summary = {"epochs": 3, "speedup_metrics": {"compile": {"recompiles": 3}}}
    assert _codes(lint.findings(CLEAN, summary)) == ["recompiles"]
    assert lint.findings(CLEAN, summary | {"speedup_metrics": {"compile": {"recompiles": 1}}}) == []


def test_an_ignored_finding_is_not_reported_and_a_wrong_code_is_named():
    from accel.config.train_config import TrainConfig

    found = _found(_fit(speedups=[ChannelsLast()], config=TrainConfig(lint_ignore=["channels-last-without-conv"])))
    assert "channels-last-without-conv" not in found
    with pytest.raises(AccelError, match="unknown speed-lint code.*chanels-last.*the codes are"):
        _fit(config=TrainConfig(lint_ignore=["chanels-last"]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart", "cifar10-resnet18", "lm-bytes"])
def test_the_shipped_cpu_recipes_have_no_findings(name):
    trainer = build_trainer(load_recipe(name), run_dir=None)
    trainer.setup()
    try:
        facts = lint.facts(trainer)
    finally:
        for speedup in reversed(trainer.speedups):
            speedup.teardown()
    found = [f for f in lint.findings(facts) if f.code not in trainer.cfg.lint_ignore]
    assert found == [], [str(f) for f in found]


def test_torchscript_is_named_with_its_replacement():
    found = lint.findings(CLEAN | {"speedup_findings": [Jit.lint_finding]})  # what jit declares it gives while on
    assert _codes(found) == ["torchscript"] and "compile" in found[0].fix and "torchscript" in codes()
    assert lint.findings(CLEAN) == []  # facts without the key (older made-up machines) find nothing


def test_a_float64_model_and_batch_are_found():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4)).double()
    data = TensorDataset(torch.randn(32, 8, dtype=torch.float64), torch.randint(0, 4, (32,)))
    found = _found(_fit(model, DataLoader(data, batch_size=8)))
    assert found["float64-model"]["found"].startswith("6 float64 parameter(s)/buffer(s) (0.weight, 0.bias, 1.weight")
    assert "model.float()" in found["float64-model"]["fix"]
    assert "1 float64 tensor(s) (shapes (8, 8))" in found["float64-batch"]["found"]  # the int64 targets are fine
    assert "float64-model" not in _found(_fit()) and "float64-batch" not in _found(_fit())


def test_a_sync_warning_is_counted_under_the_line_that_asked_for_it():
    from collections import Counter

    from accel.measure import host_syncs

    def step():
        for _ in range(2):
            warnings.warn(host_syncs.SYNC_WARNING, stacklevel=1)  # what torch says in sync-debug "warn" mode

    syncs = Counter()
    with pytest.warns(UserWarning, match="another"), host_syncs.named(syncs):
        step()
        warnings.warn("another warning", stacklevel=1)  # passes through, shown as before
    line = step.__code__.co_firstlineno + 2
    assert syncs == {f"{host_syncs._short(__file__)}:{line} in step": 2}
    summary = {"epochs": 1}
    found = lint.findings(CLEAN | {"syncs": syncs}, summary)
    assert _codes(found) == ["host-sync"] and f"test_lint.py:{line} in step (2x)" in found[0].found


class ReadsItsLoss(nn.Module):
    """A model that reads a value on the host every step: a sync on CUDA."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.seen = 0.0

    def forward(self, x):
        out = self.fc(x)
        self.seen += out.abs().mean().item()
        return out


def test_a_host_sync_is_silent_on_the_cpu(monkeypatch):
    from accel.measure import host_syncs

    monkeypatch.setattr(host_syncs, "on_cuda", lambda into: pytest.fail("sync debug mode set on a CPU run"))
    assert "host-sync" not in _found(_fit(ReadsItsLoss()))


@cuda_only
def test_a_host_sync_per_step_is_named_on_cuda():
    torch.manual_seed(0)
    model = ReadsItsLoss()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    loader = DataLoader(data, batch_size=8, pin_memory=True)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, device="cuda")
    found = _found(trainer.fit())
    line = ReadsItsLoss.forward.__code__.co_firstlineno + 2
    assert f"test_lint.py:{line} in forward (1x)" in found["host-sync"]["found"], found
    assert torch.cuda.get_sync_debug_mode() == 0  # restored after the watched step
    clean = nn.Sequential(nn.Linear(8, 4))
    trainer = Trainer(clean, torch.optim.SGD(clean.parameters(), lr=0.1), loader, device="cuda")
    assert "host-sync" not in _found(trainer.fit())
