"""FLOPs per step, counted by torch's FlopCounterMode on any model, against analytic counts; MFU's peaks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accel import Trainer, devices
from accel.config.train_config import TrainConfig
from accel.measure import peaks
from accel.measure.flops import ForwardSum, Utilisation, count_step_flops, few_samples
from accel.models import GPT, resnet18_cifar
from accel.tasks import Classification, LanguageModel


def test_gpt_flops_match_six_times_parameters_times_tokens_plus_attention():
    width, depth, context, batch, vocab = 64, 2, 32, 4, 256
    model = GPT(vocab, context, width, depth, heads=4)
    tokens = torch.randint(0, vocab, (batch, context + 1))
    counted = count_step_flops(model, LanguageModel(), (tokens[:, :-1], tokens[:, 1:]), torch.enable_grad())
    matmul_params = depth * 12 * width * width + vocab * width  # blocks, and the (tied) output layer
    n = batch * context
    analytic = 6 * matmul_params * n + 3 * depth * 4 * n * context * width  # + QK^T and AV, forward and backward
    assert abs(counted / analytic - 1) < 0.10


@pytest.mark.slow
def test_resnet18_flops_match_its_convolutions_and_layer():
    model, batch = resnet18_cifar(num_classes=10), 2
    macs = []
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            module.register_forward_hook(
                lambda m, i, out: macs.append(
                    out.numel()
                    * (
                        m.in_features
                        if isinstance(m, nn.Linear)
                        else m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                    )
                )
            )
    with torch.no_grad():
        model(torch.randn(batch, 3, 32, 32))
    forward = 2 * sum(macs)
    analytic = 3 * forward - 2 * 2 * macs[0]  # backward twice the forward, but no input gradient for the stem
    counted = count_step_flops(
        model, Classification(), (torch.randn(batch, 3, 32, 32), torch.arange(batch)), torch.enable_grad()
    )
    assert abs(counted / analytic - 1) < 0.10


def test_counting_changes_nothing_the_run_depends_on():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = (torch.randn(6, 4), torch.arange(6) % 2)
    rng = torch.get_rng_state()
    count_step_flops(model, Classification(), batch, torch.enable_grad())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats untouched
    assert all(p.grad is None for p in model.parameters()) and torch.equal(rng, torch.get_rng_state())


def test_every_run_reports_flops_and_mfu_against_the_measured_cpu_peak():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    data = [(torch.randn(8, 1, 4, 4), torch.randint(0, 3, (8,))) for _ in range(4)]
    summary = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        data,
        device="cpu",
        config=TrainConfig(epochs=1, grad_accum=2),
    ).fit()
    assert summary["flops_per_step"] == 2 * 3 * 2 * 8 * (16 * 32 + 32 * 3) - 2 * 2 * 8 * 16 * 32
    assert summary["flop_per_s"] > 0 and 0 < summary["mfu"] < 1
    assert summary["peak_source"].startswith(("hardware: ", "measured: best of 4 matmul shapes"))


def test_gpu_peaks_are_dense_and_unknown_gpus_have_none():
    assert peaks.gpu_peak("NVIDIA H100 80GB HBM3", "bf16").flop_per_s == 989e12  # not 1979, the sparse figure
    assert peaks.gpu_peak("NVIDIA H100 PCIe", "bf16").flop_per_s == 756e12
    assert peaks.gpu_peak("NVIDIA A100-SXM4-80GB", "tf32").flop_per_s == 156e12
    assert peaks.gpu_peak("NVIDIA GeForce RTX 4090", "bf16") is None


COMPUTE_DTYPES = """
import torch
from torch import nn
from accel.measure.flops import compute_dtype

cuda, cpu = torch.device("cuda"), torch.device("cpu")
linear, conv = nn.Linear(4, 4), nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
print(compute_dtype("fp32", cuda, linear), compute_dtype("fp32", cuda, conv), compute_dtype("bf16", cuda, linear))
{setting}
print(compute_dtype("fp32", cuda, linear), compute_dtype("fp32", cuda, conv), compute_dtype("fp32", cpu, linear))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting",
    [
        "torch.backends.fp32_precision = 'tf32'",  # what the Hugging Face Trainer's --tf32 does on torch >= 2.9
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'",
        "torch.set_float32_matmul_precision('high')",  # accel's cudnn speed-up, the legacy way
    ],
)
def test_mfus_peak_is_tf32_where_cuda_runs_the_models_fp32_matmuls_or_convolutions_in_it(setting):
    """By default only cuDNN's convolutions run fp32 in TF32: a transformer's matmuls do not, so its MFU is of the
    fp32 peak. Set through either of torch's APIs, TF32 matmuls are read as TF32 (the legacy flag cannot be read
    after the new API set it: the MFU of an HF Trainer's --tf32 was lost on an H200). Flags only: no GPU needed;
    a process of its own, as torch's precision settings are process-wide."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", COMPUTE_DTYPES.format(setting=setting)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["fp32 tf32 bf16", "tf32 tf32 fp32"]


def test_the_cpu_peak_is_measured_once_and_cached_where_the_hardware_is_unknown(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(peaks, "hardware_peak", lambda dtype, threads: None)
    monkeypatch.setattr(peaks, "measure_matmul", lambda dtype: calls.append(dtype) or 1e11)
    cache = tmp_path / "peaks.json"
    assert peaks.cpu_peak("fp32", cache).flop_per_s == peaks.cpu_peak("fp32", cache).flop_per_s == 1e11
    assert calls == [torch.float32] and cache.is_file()


def test_a_cpus_peak_from_its_flags_cores_and_clock(monkeypatch):
    avx2, avx512 = {"avx", "avx2", "fma"}, {"avx2", "fma", "avx512f", "avx512_bf16"}
    assert peaks.flop_per_cycle("fp32", avx2) == (32, "AVX2: 8 fp32 lanes, FMA, 2 units")
    assert peaks.flop_per_cycle("bf16", avx2)[0] == 32  # emulated: no faster than fp32
    assert peaks.flop_per_cycle("fp32", avx512)[0] == 64 and peaks.flop_per_cycle("bf16", avx512)[0] == 128
    assert peaks.flop_per_cycle("bf16", avx512 | {"amx_bf16"}) == (1024, "AMX-BF16 tiles")
    assert peaks.flop_per_cycle("fp32", {"sse2"}) is None
    # Zen 4: AVX-512 and its bf16 at half the rate, on 256-bit units (its own matmul probe reached 160 of 166 GFLOP/s)
    assert peaks.flop_per_cycle("fp32", avx512, halves_512=True) == (
        32,
        "AVX-512: 16 fp32 lanes, FMA, 2 units of 256 bits",
    )
    assert peaks.flop_per_cycle("bf16", avx512, halves_512=True)[0] == 64
    assert peaks.flop_per_cycle("fp32", avx2, halves_512=True)[0] == 32
    monkeypatch.setattr(devices, "cpu_halves_512", lambda: False)
    monkeypatch.setattr(devices, "cpu_flags", lambda: avx2)
    monkeypatch.setattr(devices, "cpu_clock_ghz", lambda: (2.5, "/proc/cpuinfo"))
    monkeypatch.setattr(devices, "available_cpus", lambda: 2)
    peak = peaks.hardware_peak("fp32", threads=4)  # threads beyond the usable cores add nothing
    assert peak.flop_per_s == 2 * 2.5e9 * 32 == 160e9
    assert (
        peak.source == "hardware: 2 cores x 2.50 GHz (/proc/cpuinfo) x 32 FLOP/cycle (AVX2: 8 fp32 lanes, FMA, 2 units)"
    )
    monkeypatch.setattr(devices, "cpu_clock_ghz", lambda: None)
    assert peaks.hardware_peak("fp32", threads=2) is None


def test_a_run_faster_than_a_cpus_peak_raises_it_without_measuring_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_PEAKS_CACHE", str(tmp_path / "peaks.json"))
    monkeypatch.setattr(peaks, "hardware_peak", lambda dtype, threads: peaks.Peak(2.39e11, dtype, "hardware: x"))
    monkeypatch.setattr(peaks, "measure_matmul", lambda dtype: pytest.fail("a probe inside a run"))
    util = Utilisation()
    util.flops_per_sample, util.peak = 1e9, peaks.cpu_peak("fp32")
    assert util.stats(200.0)["mfu"] == pytest.approx(2e11 / 2.39e11)
    assert util.stats(262.0)["mfu"] == 1.0  # the ResNet-18 that read 1.098 against a 239 GFLOP/s probe
    assert util.peak.source == "hardware: x; raised to 262 GFLOP/s, a rate a run reached here"
    assert peaks.cpu_peak("fp32").flop_per_s == 2.62e11  # kept for the next run
    peaks.reached(peaks.cpu_peak("fp32"), 2.5e11)
    assert peaks.cpu_peak("fp32").flop_per_s == 2.62e11  # a lower rate never lowers it
    gpu = Utilisation()
    gpu.flops_per_sample, gpu.peak = 1e8, peaks.Peak(1e10, "bf16", "datasheet, dense: some GPU")
    assert gpu.stats(300.0)["mfu"] == 3.0  # a datasheet's peak stands: over it, the FLOP count is wrong


def test_a_task_the_counter_cannot_follow_costs_the_figure_not_the_run():
    def step(model, batch):
        return F.mse_loss(model.weight.sum() * batch[0], batch[1])  # reaches into the module: not countable

    model = nn.Linear(1, 1)
    data = [(torch.randn(4), torch.randn(4))] * 2
    summary = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), data, task=step, device="cpu").fit()
    assert summary["status"] == "completed" and summary["flops_per_step"] is None and summary["mfu"] is None


@pytest.mark.parametrize("returns", ["outputs", "a dict with a scalar loss first", "its loss alone"])
def test_a_loops_own_model_is_counted_from_its_forward_whatever_it_returns(returns):
    # a loop of the user's own or an unchanged script: accel never sees the loss, so the forward's output stands in
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(16, 8)

        def forward(self, x, y=None):
            out = self.layer(x)
            loss = F.mse_loss(out, y)
            return {"outputs": out, "a dict with a scalar loss first": {"loss": loss, "logits": out}}.get(returns, loss)

    x, y = torch.randn(32, 16), torch.randn(32, 8)
    inputs = few_samples((x,), {"y": y})  # the first 4 samples, copied
    assert ForwardSum.samples(inputs) == 4
    counted = count_step_flops(Model(), ForwardSum, inputs, torch.enable_grad())
    assert counted == 2 * 2 * 4 * 16 * 8  # the layer's matmul forward, and its weight's gradient (x needs none)
