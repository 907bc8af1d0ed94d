"""The measurement scripts (benchmarks/, scripts/gpu_check.py) run end to end on tiny inputs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from accel import cli, devices
from accel.cli.options import parse_duration
from conftest import ROOT


def _script(*argv: str) -> str:
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_token_batch_cost_times_every_variant(tmp_path):
    report = tmp_path / "cost.json"
    out = _script(
        "benchmarks/token_batch_cost.py",
        "--tokens",
        "100000",
        "--rounds",
        "2",
        "--per-round",
        "3",
        "--json",
        str(report),
    )
    assert "shipped us" in out.splitlines()[0]
    results = json.loads(report.read_text())["results"]
    assert [(r["batch"], r["context"]) for r in results] == [(12, 64), (32, 128), (16, 1024)]
    assert all(r[name]["median_us"] > 0 for r in results for name in ("shipped", "views", "views+copy"))


@pytest.mark.slow
def test_compare_plain_loop_reports_a_ratio_and_a_verdict(tmp_path):
    report = tmp_path / "compare.json"
    _script(
        "benchmarks/compare_plain_loop.py",
        "--model",
        "small_cnn",
        "--shape",
        "1",
        "16",
        "16",
        "--batch-size",
        "16",
        "--steps",
        "3",
        "--rounds",
        "2",
        "--json",
        str(report),
    )
    result = json.loads(report.read_text())
    assert result["verdict"] in {"within", "not within", "inconclusive"}
    assert len(result["rounds"]) == 2 and result["ratio_accel_over_plain"]["median"] > 0
    assert result["step_verdict"] in {"within", "not within", "inconclusive"}
    assert all(r["accel_step_s"] > 0 and r["plain_step_s"] > 0 for r in result["rounds"])
    assert result["cpu_class"] == devices.cpu_class() and result["date"]  # each figure names its CPU class


@pytest.mark.slow
def test_compare_plain_ops_profiles_both_sides_runs_alike(tmp_path):
    report = tmp_path / "ops.json"
    argv = ["--model", "small_cnn", "--batch-size", "8", "--steps", "2", "--pairs", "1", "--json", str(report)]
    out = _script("benchmarks/compare_plain_ops.py", *argv)
    runs = json.loads(report.read_text())["runs"]
    assert list(runs) == ["accel 1", "plain 1"] and "only on accel's side: " in out
    # the same model's steps on both sides: each convolution the plain loop ran, accel ran (and its FLOP count's)
    assert runs["accel 1"]["aten::convolution"][0] > runs["plain 1"]["aten::convolution"][0] > 0


def test_parity_by_cpu_groups_results_by_class_and_fails_on_one_above_the_target(tmp_path, capsys):
    parity = _module("benchmarks/parity_by_cpu.py")
    ratio = {"median": 1.0, "ci95": [0.99, 1.01]}
    recorded = {"ratio_accel_over_plain": ratio, "verdict": "within", "cpu_class": "AMX", "commit": "abc1234"}
    older = {"ratio_accel_over_plain": ratio, "verdict": "within", "env": {"cpu": "AMD EPYC", "cpu_native_bf16": False}}
    slower = recorded | {"ratio_accel_over_plain": {"median": 1.08, "ci95": [1.04, 1.12]}, "verdict": "not within"}
    for name, result in (("amx.json", recorded), ("old.json", older)):
        (tmp_path / name).write_text(json.dumps(result))
    assert parity.main([str(tmp_path / "amx.json"), str(tmp_path / "old.json")]) == 0
    out = capsys.readouterr().out
    assert "AMX " in out and "AVX2 (from its name)" in out and "abc1234" in out
    (tmp_path / "slow.json").write_text(json.dumps(slower))
    assert parity.main([str(tmp_path / "slow.json")]) == 1
    assert "above the target (1.03) on AMX: slow.json" in capsys.readouterr().out


def _module(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_compare_plain_loop_on_a_recipe_with_overrides(tiny, write_recipe, tmp_path):
    report = tmp_path / "compare.json"
    tiny |= {"schedule": {"name": "onecycle"}, "train": tiny["train"] | {"clip_grad_norm": 1.0}}
    _script(
        "benchmarks/compare_plain_loop.py",
        "--recipe",
        str(write_recipe(tiny)),
        "--set",
        "data.batch_size=8",
        "--steps",
        "3",
        "--rounds",
        "2",
        "--json",
        str(report),
    )
    result = json.loads(report.read_text())
    assert (result["model"], result["batch_size"]) == (tiny["model"]["name"], 8)
    assert len(result["rounds"]) == 2 and result["step_verdict"] in {"within", "not within", "inconclusive"}
    assert result["speedups_applied"] == result["plain_speedups"] == []
    # the plain side alone with channels_last and twice the batch: time per sample, whatever the batch
    _script(
        "benchmarks/compare_plain_loop.py",
        "--recipe",
        str(write_recipe(tiny)),
        "--set",
        "data.batch_size=8",
        "--plain-set",
        "speedups.channels_last.enabled=true",
        "--plain-set",
        "data.batch_size=16",
        "--steps",
        "2",
        "--rounds",
        "2",
        "--json",
        str(report),
    )
    result = json.loads(report.read_text())
    assert result["plain_speedups"] == ["channels_last"] and result["speedups_applied"] == []
    assert (result["batch_size"], result["plain_batch_size"]) == (8, 16)
    r = result["rounds"][0]
    assert r["ratio"] == pytest.approx(r["accel_s"] / r["plain_s"] * 2)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole", "regional"])
def test_compile_cost_times_a_compiled_first_step(mode):
    out = _script("benchmarks/compile_cost.py", mode, "--warm", "--depth", "1", "--backend", "aot_eager")
    assert f"{mode}, 1 blocks, warm toolchain" in out and "first step" in out


@pytest.mark.slow
def test_peak_rates_measures_each_precision_the_device_has(tmp_path):
    out = tmp_path / "peaks.json"
    _script("benchmarks/peak_rates.py", "--device", "cpu", "--size", "128", "--repeats", "2", "--json", str(out))
    result = json.loads(out.read_text())
    assert set(result["matmul_tflops"]) | set(result["errors"]) == {"fp32", "bf16"}
    assert result["matmul_tflops"]["fp32"] > 0 and result["env"]["cuda_available"] is not None


@pytest.mark.slow
def test_muon_ns_dtype_times_each_dtype_at_both_orientations(tmp_path):
    out = tmp_path / "ns.json"
    _script("benchmarks/muon_ns_dtype.py", "--repeats", "1", "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert {(tuple(r["shape"]), r["ns_dtype"]) for r in rows} == {
        (shape, dtype) for shape in ((192, 768), (768, 192), (64, 192), (192, 64)) for dtype in ("bfloat16", "float32")
    }
    assert all(r["median_s"] > 0 for r in rows)


@pytest.mark.slow
def test_transformer_probe_reports_tokens_per_second_and_a_row_per_variant(tmp_path):
    out = tmp_path / "probe.json"
    _script(
        "benchmarks/transformer_probe.py",
        "--device",
        "cpu",
        "--layers",
        "1",
        "--width",
        "32",
        "--heads",
        "2",
        "--context",
        "16",
        "--batch",
        "2",
        "--vocab",
        "64",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--variants",
        "fp32,bf16+math",
        "--peak-tflops",
        "1",
        "--json",
        str(out),
    )
    rows = {row["variant"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows["fp32"]["tokens_per_s"] > 0 and 0 < rows["fp32"]["mfu"] < 1
    assert rows["bf16+math"]["loss"] < 5  # ln(64) = 4.2 at a sane initialisation
    typo = subprocess.run(
        [sys.executable, "benchmarks/transformer_probe.py", "--variants", "bf16+flsh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert typo.returncode == 2 and "unknown variant(s) bf16+flsh" in typo.stderr


@pytest.mark.slow
def test_gpu_check_writes_one_json_that_later_runs_add_to(tmp_path):
    for step in ("env", "peaks"):
        _script("scripts/gpu_check.py", "--out", str(tmp_path), "--device", "cpu", "--quick", step)
    result = json.loads((tmp_path / "gpu-check.json").read_text())
    assert set(result["steps"]) == {"env", "peaks"}
    assert result["steps"]["peaks"]["commands"][0]["rc"] == 0 and result["steps"]["peaks"]["result"]["matmul_tflops"]
    assert (tmp_path / "raw.tar.gz").is_file()


@pytest.mark.slow
def test_time_cli_times_each_quick_command_in_a_fresh_process():
    lines = _script("benchmarks/time_cli.py", "--repeat", "1").splitlines()
    assert [line.split(" median ")[0].strip() for line in lines] == [
        "accel --help",
        "accel recipes",
        "accel speedups",
        "python -c 'import torch'",
    ]


@pytest.mark.slow
def test_compare_peer_gpt_times_both_loops_at_two_lengths(tmp_path):
    """A user's GPT file (its loss calls `.view()`) trains through `accel train` and a plain loop alike."""
    report = tmp_path / "peer.json"
    _script("benchmarks/compare_peer_gpt.py", "--steps", "1", "3", "--rounds", "2", "--json", str(report))
    result = json.loads(report.read_text())
    assert [r["order"] for r in result["rounds"]] == ["accel,plain", "plain,accel"]
    assert all(
        r[f"{side}_{n}_s"] > 0 for r in result["rounds"] for side in ("accel", "plain") for n in ("short", "long")
    )
    # two and four steps are within this machine's noise: a pair may have no positive step time, and says so
    if result["ratio_plain_over_accel"] is None:
        assert result["verdict"].startswith("too noisy") and result["pairs_left_out"] == 1
    else:
        assert result["verdict"] in {"accel faster", "accel slower", "no measurable difference"}
        assert len(result["ratio_plain_over_accel"]["pairs"]) == 1


@pytest.mark.slow
def test_peer_gpt_steps_times_all_four_loops(tmp_path):
    out = tmp_path / "steps.json"
    _script("benchmarks/peer_gpt_steps.py", "--rounds", "1", "--steps", "8", "--json", str(out))
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {"plain", "plain, accel's AdamW", "plain, accel's loader", "accel"}
    assert all(row["median_step_s"] > 0 for row in summary.values())
    assert summary["plain"]["over_plain"] == [1.0, 1.0, 1.0]


def test_gpu_check_lm_steps_build_commands_accel_accepts(tmp_path, monkeypatch):
    """The language-model steps and those named only on a GPU machine (lm-levers, ...) run commands whose flags
    and recipe keys accel accepts: each is parsed, and each bench's variants are built (`--list`), without
    training anything."""
    gpu_check = _module("scripts/gpu_check.py")
    commands: list[list[str]] = []
    monkeypatch.setattr(gpu_check.Check, "sh", lambda self, step, command, timeout=600: commands.append(command))
    assert gpu_check.main(["--out", str(tmp_path), "lm", *gpu_check.EXTRA]) == 0
    steps = json.loads((tmp_path / "gpu-check.json").read_text())["steps"]
    assert set(steps) == {"lm", *gpu_check.EXTRA} and not any("error" in s for s in steps.values())
    # own-loop's: the two overhead scripts; own-bench's bench of the GPT example, hf-script's and hf-compile's of
    # the HF Trainer example (`-- SCRIPT`: a probe would run it, so only its bench's own options are parsed)
    scripts = [c for c in commands if "accel.cli" not in c or "--" in c]
    overheads = [c[1] for c in scripts if "accel.cli" not in c]
    assert overheads == ["benchmarks/engine_step_cost.py", "benchmarks/engine_overhead.py"]
    benches = [c for c in scripts if "accel.cli" in c]
    hf = "examples/hf_trainer.py"
    assert [c[c.index("--") + 2] for c in benches] == ["examples/gpt_loop.py", hf, hf]
    for command in benches:
        assert cli._parser().parse_args(command[command.index("accel.cli") + 1 : command.index("--")])
    accel = [command[command.index("accel.cli") + 1 :] for command in commands if command not in scripts]
    assert len(accel) == 20
    for argv in accel:
        args = cli._parser().parse_args(argv)
        assert args.command in {"bench", "tune"}
        if args.command == "tune":
            assert "--budget" in argv and parse_duration(argv[argv.index("--budget") + 1]) <= 8 * 60
        else:
            assert cli.main([*argv, "--list"]) == 0, argv
