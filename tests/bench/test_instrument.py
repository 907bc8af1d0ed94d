"""accel's instrument (accel/trial/instrument): an unchanged script, with no line of accel in it, measured from its
optimizer steps under `accel bench -- python train.py`."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest
import torch

from accel.bench.records import Trial
from accel.bench.trial_process import instrumented_pythonpath
from accel.cli import main
from accel.engine import trial_variables
from accel.measure import peaks
from conftest import ROOT

# A plain loop, no accel in it: a DataLoader, an evaluation and a checkpoint write every 5 steps, an optional
# compiled model, GradScaler and gradient accumulation; token ids in, as a language model's.
PLAIN = """
import argparse, os, time
import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=int(os.environ.get("BATCH", "8")))
parser.add_argument("--steps", type=int, default=10**6)
parser.add_argument("--accum", type=int, default=1)
parser.add_argument("--compile", action="store_true")
parser.add_argument("--compile-in-place", action="store_true")  # model.compile(): its own calls are the compiled ones
parser.add_argument("--scaler", action="store_true")
parser.add_argument("--out", default=".")
parser.add_argument("--slow-first", type=float, default=0.0)  # seconds the first step takes more (a compilation)
parser.add_argument("--helper", action="store_true")  # a child process that imports torch, as a compile worker
parser.add_argument("--pool", action="store_true")  # inductor's compile-worker pool, as torch.compile starts on a GPU
args = parser.parse_args()
torch.manual_seed(0)
if args.pool:
    from torch._inductor import async_compile, config
    with config.patch(compile_threads=2):
        async_compile.AsyncCompile.warm_pool()
    (pool,) = async_compile._pool_set
if args.helper:  # as inductor's compile workers: started by the script, ended and waited for at its exit
    import atexit, subprocess, sys
    helper = subprocess.Popen([sys.executable, "-c", "import sys, torch; sys.stdin.read()"], stdin=subprocess.PIPE)
    atexit.register(lambda: (helper.stdin.close(), helper.wait()))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32)

    def forward(self, ids):
        return self.head(self.embed(ids))


raw = Model()
model = torch.compile(raw, backend="eager") if args.compile else raw
if args.compile_in_place:
    model.compile(backend="eager")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=args.scaler)
ids = torch.randint(0, 32, (512, 6))
loader = DataLoader(TensorDataset(ids), batch_size=args.batch)
step = 0
while step < args.steps:
    for i, (x,) in enumerate(loader):
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()) / args.accum
        scaler.scale(loss).backward()
        if (i + 1) % args.accum:
            continue
        if step == 0:
            time.sleep(args.slow_first)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        print("step", step, flush=True)
        if args.pool:
            with open(os.path.join(args.out, "pool.txt"), "a") as f:
                print(step, pool.process.poll() is None, file=f)
        if step == args.steps:
            break
        if step % 5 == 0:
            model.eval()
            with torch.no_grad():
                model(x[:, :-1])
                time.sleep(0.2)
            model.train()
            path = os.path.join(args.out, "ckpt.pt")  # written atomically, and read back
            torch.save(raw.state_dict(), path + ".tmp")
            os.replace(path + ".tmp", path)
            assert torch.load(path)["head.weight"].shape == (32, 16)
"""


def _script(tmp_path, text: str = PLAIN):
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


def _trial(tmp_path, *args: str, steps: int = 6, warmup: int = 2, text: str = PLAIN, **env: str) -> Trial:
    """Run the script (`text`) once as a bench trial does, the instrument loaded; its record."""
    record = tmp_path / "trial.json"
    variables = {
        "PYTHONPATH": instrumented_pythonpath(),
        trial_variables.PATH: str(record),
        trial_variables.STEPS: str(steps),
        trial_variables.WARMUP: str(warmup),
        **env,
    }
    command = [sys.executable, str(_script(tmp_path, text)), "--out", str(tmp_path), *args]
    done = subprocess.run(command, env=os.environ | variables, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return Trial.model_validate_json(record.read_text())


@pytest.mark.slow
def test_an_unchanged_loop_is_measured_from_its_optimizer_steps_and_ended(tmp_path):
    trial = _trial(tmp_path)
    timed = trial.steps + (trial.warmup_cut or 0)  # a leading one-off (a stall under load) counts as warm-up
    assert trial.error is None and timed == 6 and len(trial.step_times_s) == trial.steps
    assert trial.batch_size == 8 and trial.grad_accum == 1 and trial.samples_per_s > 0
    assert trial.tokens_per_s == pytest.approx(trial.samples_per_s * 5)  # token ids: 5 a sample
    assert len(trial.step_losses) == 8 and trial.final_loss > 0  # warm-up included, read without a sync a step
    assert trial.data_wait_fraction is not None and trial.model_traits is not None
    # FLOPs counted after the timed steps on the model's own forward: the head's matmul of 8 x 5 tokens, and its two
    # in backward (the embedding's lookup is no FLOP); MFU against this CPU's fp32 peak
    assert trial.flops_per_step == 3 * 2 * (8 * 5) * 16 * 32 and 0 < trial.mfu < 1 and trial.mfu_of == "fp32"
    assert trial.flop_per_s == pytest.approx(trial.flops_per_step / 8 * trial.samples_per_s)
    # the evaluation at step 5 (0.2 s asleep) and its checkpoint are timed apart, out of the step they fell in
    assert trial.eval_s >= 0.2 and trial.save_s > 0 and max(trial.step_times_s) < 0.2


# Speed traps a script can set itself: anomaly detection, float64 weights and inputs, more threads than cores.
TRAPPED = """
import os
import torch

torch.autograd.set_detect_anomaly(True)
torch.set_num_threads(2 * len(os.sched_getaffinity(0)))
model = torch.nn.Linear(4, 1).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    model(torch.randn(8, 4, dtype=torch.float64)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""


@pytest.mark.slow
def test_the_speed_lint_reads_an_unchanged_scripts_training_and_says_its_fixes_in_the_scripts_terms(tmp_path):
    lint = {f["code"]: f for f in _trial(tmp_path, text=TRAPPED, steps=2, warmup=1).lint}
    assert {"anomaly-detection", "float64-model", "float64-batch", "threads-over-cores"} <= set(lint)
    assert "torch.set_num_threads(" in lint["threads-over-cores"]["fix"]  # not a recipe's `speedups: {threads}`
    assert "(8, 4)" in lint["float64-batch"]["found"]
    # the plain loop of the other tests sets none of them (fp32 is one only where bf16 is fast: AMX)
    (tmp_path / "plain").mkdir()
    plain = {f["code"] for f in _trial(tmp_path / "plain", steps=2, warmup=1).lint}
    assert plain <= {"fp32-with-fast-bf16"}


@pytest.mark.slow
def test_a_process_the_script_starts_is_not_the_trial(tmp_path):
    # inductor's compile workers import torch in processes of their own, which end after the script's record is
    # written (a compiled HF Trainer script on a GPU was reported as never stepping): the record stays the script's
    trial = _trial(tmp_path, "--helper", steps=2, warmup=1)
    assert trial.error is None and trial.steps == 2


@pytest.mark.slow
def test_a_rank_that_crashes_before_its_first_step_says_why(tmp_path):
    # torchrun's ranks are processes the launcher started, as compile workers are the script's: a crash there is
    # still the trial's failure, with its traceback
    record, script = tmp_path / "trial.json", _script(tmp_path, "import torch\nraise RuntimeError('no data here')\n")
    variables = {"PYTHONPATH": instrumented_pythonpath(), trial_variables.PATH: str(record)}
    variables |= {trial_variables.STEPS: "2", trial_variables.WARMUP: "1", trial_variables.ROOT: "1"}  # pid 1: not us
    done = subprocess.run([sys.executable, str(script)], env=os.environ | variables, capture_output=True, timeout=300)
    assert done.returncode == 1
    assert "RuntimeError: no data here" in Trial.model_validate_json(record.read_text()).error


@pytest.mark.slow
def test_the_machines_load_is_read_over_the_timed_steps_only(tmp_path):
    trial = _trial(tmp_path, "--slow-first", "1", steps=3, warmup=2)  # a neighbour in the warm-up is not counted
    assert sum(trial.step_times_s) <= trial.load["wall_s"] < sum(trial.step_times_s) + 0.5 < trial.warmup_s


@pytest.mark.slow
def test_a_target_a_plain_loop_never_logs_says_how_to_log_it(tmp_path):
    trial = _trial(tmp_path, steps=2, warmup=1, **{trial_variables.TARGET: "val_loss=1.0"})
    assert trial.unlogged_metric == "val_loss" and trial.error == (
        "the script logged no `val_loss` in its 3 optimizer steps (it logged nothing): give accel bench "
        "--metric-pattern 'val_loss (?P<val_loss>[0-9.eE+-]+)' matching a line it prints, or have it write "
        "SummaryWriter.add_scalar('val_loss', value), within the trial's steps"
    )


@pytest.mark.slow
def test_an_unchanged_loop_past_its_deadline_is_stopped_short_of_its_target(tmp_path):
    # its "loss" is the step it prints, read through a metric pattern: it never reaches 0 within a deadline of 0 s
    said = {trial_variables.PATTERNS: json.dumps(["step (?P<val_loss>[0-9]+)"]), trial_variables.STOP: "1"}
    asked = {trial_variables.TARGET: "val_loss=0", trial_variables.DEADLINE: "0", **said}
    trial = _trial(tmp_path, "--steps", "50", steps=0, warmup=1, **asked)
    assert trial.error is None and "past its deadline of 0.0 s" in trial.pruned
    assert len(trial.step_losses) == 2  # stopped at its first step past the warm-up, not at its 50th


@pytest.mark.slow
def test_accumulation_counts_micro_batches_in_a_step_and_the_scalers_loss_is_unscaled(tmp_path):
    plain = _trial(tmp_path, "--accum", "2", steps=2, warmup=1)
    scaled = _trial(tmp_path, "--accum", "2", "--scaler", steps=2, warmup=1)
    assert plain.batch_size == 8 and plain.grad_accum == 2
    assert scaled.step_losses == pytest.approx(plain.step_losses, rel=1e-4)  # not 1024 times larger


# LBFGS's step runs the closure up to max_iter times on the step's one batch; it returns the first evaluation's loss
CLOSURE = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
x, y = torch.randn(12, 4), torch.randn(12, 1)
for step in range(10**6):
    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    print("loss", optimizer.step(closure).item(), file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_a_closures_re_evaluations_are_not_counted_as_samples_nor_losses(tmp_path):
    trial = _trial(tmp_path, steps=3, warmup=1, text=CLOSURE)
    assert trial.error is None and trial.batch_size == 12 and trial.grad_accum == 1  # not 5 micro-batches of 12
    assert trial.samples_per_s * sum(trial.step_times_s) == pytest.approx(3 * 12, rel=0.05)
    # each step's loss is LBFGS's own, its first evaluation's, not the sum of its line search's five
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(12, 4), torch.randn(12, 1)
    assert trial.step_losses[0] == pytest.approx(torch.nn.functional.mse_loss(model(x), y).item(), rel=1e-5)
    assert len(trial.step_losses) == 4 and trial.step_losses == sorted(trial.step_losses, reverse=True)


@pytest.mark.slow
def test_mfu_is_read_against_the_peak_of_an_autocast_opened_inside_the_models_forward(tmp_path):
    # Accelerate (an HF Trainer's --bf16 on a CPU) wraps the model's forward in its autocast: the model's own
    # pre-hooks run outside it, so the precision is read again inside the forward
    patched = PLAIN.replace(
        "raw = Model()\n", "raw = Model()\nraw.forward = torch.autocast('cpu', dtype=torch.bfloat16)(raw.forward)\n"
    )
    assert patched != PLAIN
    trial = _trial(tmp_path, steps=3, warmup=1, text=patched)
    bf16 = peaks.run_peak(torch.device("cpu"), "bf16").flop_per_s
    assert trial.flop_per_s / trial.mfu == pytest.approx(bf16, rel=1e-6) and trial.mfu_of == "bf16"


@pytest.mark.slow
def test_a_compiled_model_is_counted_outside_its_graph_without_a_recompilation(tmp_path):
    trial = _trial(tmp_path, "--compile", steps=3, warmup=1)
    assert trial.error is None and trial.batch_size == 8 and trial.recompiles == 0
    # the first forward's compilation is the compile seconds, not start-up too: both fit before the first step
    assert trial.compile_s > 0 and trial.build_s + trial.compile_s <= trial.first_step_s


@pytest.mark.slow
def test_a_model_compiled_in_place_is_counted_around_its_compiled_call_without_a_recompilation(tmp_path):
    # model.compile() runs the module's hooks inside the compiled call, where one added now would recompile it:
    # every trial of such a script failed with no samples counted
    trial = _trial(tmp_path, "--compile-in-place", steps=3, warmup=1)
    assert trial.error is None and trial.batch_size == 8 and trial.recompiles == 0 and trial.samples_per_s > 0
    assert trial.compile_s > 0 and trial.flops_per_step > 0


@pytest.mark.slow
def test_the_scripts_compile_workers_are_stopped_by_the_end_of_the_warm_up(tmp_path):
    """torch.compile starts inductor's pool of workers, a warm cache or not; on an H200's host their start halved
    a compiled model's throughput through the timed steps. The instrument stops the pool as the warm-up ends."""
    trial = _trial(tmp_path, "--pool", steps=2, warmup=2)
    alive = dict(line.split() for line in (tmp_path / "pool.txt").read_text().splitlines())
    assert trial.error is None and alive["2"] == alive["3"] == "False"  # the warm-up's last step on (4: it ended)


@pytest.mark.slow
def test_env_variants_and_options_of_an_unchanged_script_are_benched(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "env:BATCH=4,16", "--steps", "3", "--warmup", "1", "--trials", "2"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(_script(tmp_path))]) == 0
    got = json.loads((out / "report.json").read_text())
    assert [v["name"] for v in got["variants"]] == ["env:BATCH=4", "env:BATCH=16"]
    assert got["recipes"]["env:BATCH=16"]["env"] == {"BATCH": "16"}
    for variant, batch in zip(got["variants"], (4, 16)):
        assert variant["ok_trials"] == 2 and len(variant["samples_per_s"]["ci95"]) == 2
        assert {t["batch_size"] for t in variant["trials"]} == {batch}
    for name in ("report.md", "report.html"):
        assert (out / name).is_file()


# nanoGPT's way of taking options: globals, overridden by `--key=value` only (a value read as a Python literal,
# of the global's own type) by a configurator.py the script runs with exec().
CONFIGURATOR = """
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith("--") and "=" in arg, f"options are --key=value: {arg}"
    key, text = arg[2:].split("=")
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    assert type(value) is type(globals()[key]), f"{key}: {text} is not a {type(globals()[key]).__name__}"
    globals()[key] = value
"""
GLOBALS_LOOP = """
import os
import torch

batch_size = 8
decay_lr = True
exec(open(os.path.join(os.path.dirname(__file__), "configurator.py")).read())
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * 0.99 if decay_lr else group["lr"]
    model(torch.randn(batch_size, 4)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""


@pytest.mark.slow
def test_a_nanogpt_style_scripts_options_reach_it_in_the_one_form_its_configurator_reads(tmp_path):
    (tmp_path / "configurator.py").write_text(CONFIGURATOR)
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--decay_lr=False,True", "--vary", "arg:--batch_size=4", "--trials", "1"]
    script = _script(tmp_path, GLOBALS_LOOP)
    assert main([*argv, "--steps", "2", "--warmup", "1", "--out", str(out), "--", sys.executable, str(script)]) == 0
    got = json.loads((out / "report.json").read_text())
    # an option the command lacks is appended as `--batch_size=4`, and a boolean spelled as Python's `False`
    assert [v["ok_trials"] for v in got["variants"]] == [1, 1]
    assert [t["batch_size"] for v in got["variants"] for t in v["trials"]] == [4, 4]
    assert got["recipes"]["arg:--decay_lr=False,arg:--batch_size=4"]["command"].endswith(
        "--decay_lr=False --batch_size=4"
    )


# a plain loop whose options are none of the speed switches accel knows; `--fail` ends it on its parser's error
OWN_OPTIONS = """
import argparse, torch
parser = argparse.ArgumentParser(prog="train.py")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--fail", action="store_true")
args = parser.parse_args()
if args.fail:
    parser.error("--fail cannot train")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
while True:
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


@pytest.mark.slow
def test_an_engine_setting_or_an_ablation_of_a_script_without_speed_switches_is_refused(tmp_path, capsys):
    path = str(_script(tmp_path, OWN_OPTIONS))
    assert main(["bench", "--vary", "speedups.amp.enabled=true", "--list", "--", sys.executable, path]) == 2
    assert "an accel.Engine setting" in capsys.readouterr().err
    assert main(["bench", "--ablate", "--list", "--", sys.executable, path]) == 2
    assert "takes none that accel knows" in capsys.readouterr().err


@pytest.mark.slow
def test_a_plain_scripts_own_flags_are_found_ablated_and_checked_by_its_own_parser(tmp_path, capsys):
    command = ["--", sys.executable, str(_script(tmp_path)), "--out", str(tmp_path)]
    assert main(["bench", "--ablate", "--list", *command]) == 0
    listed = capsys.readouterr().out
    assert "--compile=present" in listed and "found --compile (torch.compile): --compile, by its name" in listed
    # `True` after a store_true flag: argparse refuses it, so the variant is refused before any trial, in its words
    assert main(["bench", "--vary", "arg:--compile=null,True", "--list", *command]) == 2
    assert "error: argument --compile: ignored explicit argument 'True'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_trial_that_exits_on_the_scripts_own_error_says_that_error(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--fail=absent,present", "--trials", "1", "--steps", "2", "--warmup", "1"]
    assert main([*argv, "--out", str(out), "--", sys.executable, str(_script(tmp_path, OWN_OPTIONS))]) == 0
    failed = json.loads((out / "report.json").read_text())["variants"][1]["trials"][0]
    said = "the script exited with code 2 before its first optimizer step: train.py: error: --fail cannot train"
    assert failed["error"].startswith(said)


@pytest.mark.slow
def test_a_script_that_never_steps_is_stopped_at_the_limit_with_its_last_output(tmp_path, capsys):
    evaluating = "import time, torch\nmodel = torch.nn.Linear(2, 2)\nwhile True:\n"
    evaluating += "    with torch.no_grad():\n        model(torch.ones(1, 2))\n    print('evaluating', flush=True)\n"
    evaluating += "    time.sleep(0.1)\n"
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--x=1,2", "--timeout", "8", "--out", str(out)]
    assert main([*argv, "--", sys.executable, str(_script(tmp_path, evaluating))]) == 2
    err = capsys.readouterr().err
    assert "did not step an optimizer (nor create an accel.Engine) within 8 s" in err and "evaluating" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_trial_that_runs_out_of_steps_says_how_many_it_had(tmp_path):
    error = _trial(tmp_path, "--steps", "3", steps=5, warmup=1).error
    assert error.startswith("the script ended after 3 of the 6 optimizer steps the bench asked for")


# --- a Hugging Face Trainer script, unchanged (examples/hf_trainer.py) -------------------------------------------

HF_SCRIPT = ROOT / "examples" / "hf_trainer.py"


def _hf(out_dir, *args: str) -> list[str]:
    return [sys.executable, str(HF_SCRIPT), "--output_dir", str(out_dir), "--report_to", "none", *args]


@pytest.mark.slow
def test_a_trainer_script_is_benched_with_its_eval_loss_and_its_output_dir_untouched(tmp_path):
    out, output_dir = tmp_path / "bench", tmp_path / "hf-out"
    argv = ["bench", "--vary", "arg:--per_device_train_batch_size=4,8", "--steps", "4", "--warmup", "2", "--trials"]
    evaluating = ("--eval_strategy", "steps", "--eval_steps", "3", "--save_steps", "2", "--logging_steps", "1")
    assert main([*argv, "2", "--out", str(out), "--", *_hf(output_dir, *evaluating)]) == 0
    got = json.loads((out / "report.json").read_text())
    for variant, batch in zip(got["variants"], (4, 8)):
        assert variant["ok_trials"] == 2 and variant["samples_per_s"]["median"] > 0
        for trial in variant["trials"]:
            assert trial["batch_size"] == batch and trial["tokens_per_s"] == pytest.approx(32 * trial["samples_per_s"])
            assert trial["val_metric_name"] == "eval_loss" and trial["val_metric"] > 0 and trial["eval_s"] > 0
            assert trial["save_s"] > 0 and len(trial["step_losses"]) == 6
            assert trial["run_steps"] == 3 * 2048 // batch  # the Trainer's own: 3 epochs of its 2048 samples
            assert trial["flops_per_step"] > 0 and 0 < trial["mfu"] < 1  # the GPT-2's forward, counted after
        assert variant["mfu"] == pytest.approx(statistics.median(t["mfu"] for t in variant["trials"]))
    per_sample = [v["trials"][0]["flops_per_step"] / batch for v, batch in zip(got["variants"], (4, 8))]
    assert per_sample[0] == pytest.approx(per_sample[1], rel=1e-3)  # a sample's FLOPs, whatever the batch
    assert got["settings"]["run_steps"] == 3 * 2048 // 4  # the baseline's, which a start-up must pay within
    assert not output_dir.exists() or not any(output_dir.iterdir())  # checkpoints every 2 steps went elsewhere


@pytest.mark.slow
def test_a_trainer_scripts_ablation_switches_its_own_flags_and_skips_what_cannot_run_here(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--ablate", "--only", "baseline,--torch_compile=True,--fp16=True", "--steps", "2"]
    argv += ["--warmup", "1", "--trials", "1", "--out", str(out), "--", *_hf(tmp_path / "hf-out")]
    assert main(["bench", "--ablate", "--list", "--", *_hf(tmp_path / "hf-out")]) == 0
    listed = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines() if " " in line.strip())
    assert listed["--bf16=True"] == "arg:--bf16=True arg:--use_cpu=True"  # the Trainer's bf16 on a CPU needs it
    assert main(argv) == 0
    assert "--fp16=True: refused, not run: needs a CUDA GPU" in capsys.readouterr().out
    got = json.loads((out / "report.json").read_text())
    compiled = next(v for v in got["variants"] if v["name"] == "--torch_compile=True")
    assert compiled["ok_trials"] == 1 and compiled["compile_s"] > 0
    assert got["recipes"]["--torch_compile=True"]["command"].endswith("--torch_compile=True")


@pytest.mark.slow
def test_time_to_an_eval_loss_target_of_a_trainer_script(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "--vary", "arg:--learning_rate=0.001,0.003", "--target", "eval_loss=5.6", "--steps", "8"]
    argv += ["--warmup", "1", "--trials", "1", "--out", str(out), "--"]
    assert main([*argv, *_hf(tmp_path / "hf-out", "--eval_strategy", "steps", "--eval_steps", "2")]) == 0
    for variant in json.loads((out / "report.json").read_text())["variants"]:
        trial = variant["trials"][0]
        assert trial["time_to_target_s"] > 0 and trial["target_evals"][0]["value"] < 5.6


# --- Lightning, unchanged: a LightningCLI script (examples/lightning_cli.py) and a Fabric loop ---------------------

LIGHTNING_SCRIPT = ROOT / "examples" / "lightning_cli.py"


def _lightning(root, *args: str) -> list[str]:
    quiet = ("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false")
    return [sys.executable, str(LIGHTNING_SCRIPT), "fit", "--trainer.default_root_dir", str(root), *quiet, *args]


@pytest.mark.slow
def test_a_lightning_script_is_benched_with_its_val_loss_and_its_run_folder_untouched(tmp_path):
    out, root = tmp_path / "bench", tmp_path / "runs"
    argv = ["bench", "--vary", "arg:--data.batch_size=4,8", "--target", "val_loss=5.8", "--steps", "4", "--warmup"]
    argv += ["2", "--trials", "1", "--out", str(out), "--", *_lightning(root, "--trainer.val_check_interval", "3")]
    assert main(argv) == 0
    got = json.loads((out / "report.json").read_text())
    for variant, batch in zip(got["variants"], (4, 8)):
        trial = variant["trials"][0]
        assert variant["ok_trials"] == 1 and trial["batch_size"] == batch and trial["grad_accum"] == 1
        assert trial["tokens_per_s"] == pytest.approx(33 * trial["samples_per_s"])  # from the batch Lightning gave
        assert trial["val_metric_name"] == "val_loss" and trial["val_metric"] > 0 and trial["eval_s"] > 0
        assert trial["time_to_target_s"] > 0 and len(trial["step_losses"]) == 6
        assert trial["flops_per_step"] > 0 and 0 < trial["mfu"] < 1  # the LightningModule's model, in its closure
    assert not root.exists()  # its logs, checkpoints and LightningCLI's config.yaml went to the trial's own folder


@pytest.mark.slow
def test_a_lightning_cli_scripts_ablation_switches_its_precision_and_skips_what_cannot_run_here(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--ablate", "--steps", "2", "--warmup", "1", "--trials", "1", "--out", str(out), "--"]
    assert main([*argv, *_lightning(tmp_path / "runs")]) == 0
    assert "--trainer.precision=16-mixed: refused, not run: needs a CUDA GPU" in capsys.readouterr().out
    got = json.loads((out / "report.json").read_text())
    bf16 = next(v for v in got["variants"] if v["name"] == "--trainer.precision=bf16-mixed")
    assert bf16["ok_trials"] == 1
    assert got["recipes"]["--trainer.precision=bf16-mixed"]["command"].endswith("--trainer.precision=bf16-mixed")


FABRIC = """
import torch
from lightning.fabric import Fabric

fabric = Fabric(accelerator="cpu", devices=1)
model, optimizer = fabric.setup(*(lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1)))(torch.nn.Linear(4, 1)))
x, y = torch.randn(64, 4), torch.randn(64, 1)
for step in range(10**6):
    loss = torch.nn.functional.mse_loss(model(x), y)
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    fabric.log("val_loss", loss.detach())
"""


@pytest.mark.slow
def test_a_fabric_loop_is_measured_with_what_it_logs(tmp_path):
    record = tmp_path / "trial.json"
    variables = {"PYTHONPATH": instrumented_pythonpath(), trial_variables.PATH: str(record), trial_variables.STEPS: "3"}
    done = subprocess.run(
        [sys.executable, str(_script(tmp_path, FABRIC))], env=os.environ | variables, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    trial = Trial.model_validate_json(record.read_text())
    assert trial.error is None and trial.batch_size == 64 and trial.steps == 3
    assert trial.val_metric_name == "val_loss" and trial.val_metric > 0


# --- metrics a plain loop reports: printed lines (--metric-pattern) and TensorBoard ---------------------------------

PRINTING = """
import argparse, sys
import torch
from torch.utils.tensorboard import SummaryWriter

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--logs")
args = parser.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
writer = SummaryWriter(args.logs)
x, w = torch.randn(256, 8), torch.randn(8, 1)
y = x @ w
for step in range(1, 10**6):
    loss = torch.nn.functional.mse_loss(model(x[:32]), y[:32])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 3 == 0:
        with torch.no_grad():
            val = torch.nn.functional.mse_loss(model(x[32:]), y[32:]).item()
        print(f"step {step}: train loss {loss.item():.4f}, val loss {val:.4f}", end="\\n", flush=True)
        writer.add_scalar("val/loss", torch.tensor(val), step)
"""
VAL_LOSS = "val loss (?P<val_loss>[0-9.]+)"


@pytest.mark.slow
def test_a_plain_loops_printed_and_tensorboard_metrics_are_its_metrics(tmp_path):
    script = _script(tmp_path, PRINTING)
    for env, name in (({trial_variables.PATTERNS: json.dumps([VAL_LOSS])}, "val_loss"), ({}, "val/loss")):
        record = tmp_path / "trial.json"
        variables = {
            "PYTHONPATH": instrumented_pythonpath(),
            trial_variables.PATH: str(record),
            trial_variables.STEPS: "7",
        }
        command = [sys.executable, str(script), "--logs", str(tmp_path / "logs")]
        done = subprocess.run(command, env=os.environ | variables | env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "val loss" in done.stdout  # printed through, as the script wrote it
        trial = Trial.model_validate_json(record.read_text())
        assert trial.error is None and trial.val_metric_name == name and 0 < trial.val_metric < 10
        assert trial.eval_s > 0  # its no-grad evaluation, timed apart
    assert not (tmp_path / "logs").exists()  # the trial's event files went to its own folder


@pytest.mark.slow
def test_time_to_a_printed_metric_target_of_a_plain_loop(tmp_path, capsys):
    out, script = tmp_path / "bench", str(_script(tmp_path, PRINTING))
    argv = ["bench", "--vary", "arg:--lr=0.02,0.1", "--metric-pattern", VAL_LOSS, "--target", "val_loss=2.0"]
    argv += ["--steps", "12", "--warmup", "1", "--trials", "1", "--out", str(out), "--", sys.executable, script]
    assert main([*argv, "--logs", str(tmp_path / "logs")]) == 0
    slow, fast = (v["trials"][0] for v in json.loads((out / "report.json").read_text())["variants"])
    assert fast["time_to_target_s"] > 0 and fast["target_evals"][0]["value"] <= 2.0
    assert all(e["step"] % 3 == 0 for e in slow["target_evals"])  # read at each printed evaluation
    with pytest.raises(SystemExit):
        main(["bench", "--metric-pattern", "val loss [0-9.]+", "--", sys.executable, script])
    assert "names no metric: put the value in a named group" in capsys.readouterr().err


TRACKED = """
import sys
import numpy as np
import torch

tracker, where = sys.argv[1:]
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, w = torch.randn(256, 8), torch.randn(8, 1)
if tracker == "wandb":
    import wandb

    run = wandb.init(project="theirs", dir=where, mode="online")  # no W&B server is reachable from a test
    report = lambda step, val: wandb.log({"val/loss": np.float32(val), "step": step})
else:
    import mlflow

    mlflow.set_tracking_uri(where)  # nor an MLflow server
    client = mlflow.MlflowClient(tracking_uri=where)
    run = mlflow.start_run()
    report = lambda step, val: mlflow.log_metrics({"val_loss": val}, step=step)
for step in range(1, 10**6):
    loss = torch.nn.functional.mse_loss(model(x[:32]), (x @ w)[:32])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 3 == 0:
        with torch.no_grad():
            report(step, torch.nn.functional.mse_loss(model(x[32:]), (x @ w)[32:]).item())
"""


@pytest.mark.slow
@pytest.mark.parametrize("tracker, name", [("wandb", "val/loss"), ("mlflow", "val_loss")])
def test_metrics_a_loop_logs_to_wandb_or_mlflow_are_its_metrics_and_its_tracking_is_the_trials_own(
    tmp_path, tracker, name
):
    script, theirs = _script(tmp_path, TRACKED), tmp_path / "theirs"
    theirs.mkdir()
    where = str(theirs) if tracker == "wandb" else "http://127.0.0.1:9"
    record = tmp_path / "trial.json"
    variables = {"PYTHONPATH": instrumented_pythonpath(), trial_variables.PATH: str(record), trial_variables.STEPS: "7"}
    command = [sys.executable, str(script), tracker, where]
    done = subprocess.run(command, env=os.environ | variables, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    trial = Trial.model_validate_json(record.read_text())
    assert trial.error is None and trial.val_metric_name == name and 0 < trial.val_metric < 10
    assert trial.eval_s > 0 and list(theirs.iterdir()) == []  # nothing written to the script's W&B folder


@pytest.mark.slow
def test_a_window_the_script_ends_before_is_measured_and_said_short(tmp_path):
    trial = _trial(tmp_path, "--steps", "8", steps=3, warmup=1, **{trial_variables.WINDOW: "30"})
    assert trial.error is None and trial.warmup_cut + trial.steps == 7  # all the script made after its warm-up step
    assert "held" in trial.window_note and "of the 30 s asked (--window): the script's last step" in trial.window_note
