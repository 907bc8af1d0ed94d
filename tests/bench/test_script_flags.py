"""The Trainer flags an unchanged script's --ablate and tune switch, read from what the script was given."""

from __future__ import annotations

import argparse

import pytest

from accel import devices
from accel.bench.script_flags import framework_ablation
from accel.errors import AccelError
from accel.trial.instrument.parsers import described

HF_DEFAULTS = {
    "bf16": False,
    "fp16": False,
    "tf32": None,
    "torch_compile": False,
    "optim": "adamw_torch",
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": True,
    "gradient_checkpointing": False,
    "use_liger_kernel": False,
}


def _variants(**given) -> dict[str, dict]:
    flags = HF_DEFAULTS | given
    variants, _ = framework_ablation(
        {"framework": "hf", "command_line": True, "resolved_device": "cpu", "flags": flags}, ["python", "train.py"]
    )
    return {v.name: v.overrides for v in variants}


def test_a_flag_the_script_sets_its_own_way_is_switched_off_not_to_accels_value():
    # a script's 8 loader workers are tried against none; accel's own number would compare 8 with 4
    assert "--dataloader_num_workers=0" in _variants(dataloader_num_workers=8)
    assert "--dataloader_num_workers=0" not in _variants()  # given none: tried with some
    assert "--bf16=False" in _variants(bf16=True) and "--bf16=True" in _variants()


# --- a plain script's own speed switches, found in its argparse parser by their meaning -----------------------------


def _parser(*arguments: tuple[tuple[str, ...], dict], argv: tuple[str, ...] = ()) -> dict:
    """The probe's record of a parser with these `add_argument` calls, parsed from `argv`."""
    parser = argparse.ArgumentParser(prog="train.py")
    for spellings, kwargs in arguments:
        parser.add_argument(*spellings, **kwargs)
    return described(parser, parser.parse_args(list(argv)), strict=True)


TIMM = (
    (("--amp",), {"action": "store_true", "help": "use AMP for mixed precision training"}),
    (("--amp-dtype",), {"default": "float16", "type": str, "help": "lower precision AMP dtype (default: float16)"}),
    (("--model-dtype",), {"default": None, "type": str, "help": "Model dtype override (non-AMP) (default: float32)"}),
    (("--channels-last",), {"action": "store_true", "help": "Use channels_last memory layout"}),
    (("--torchcompile",), {"nargs": "?", "type": str, "default": None, "const": "inductor"}),
    (("--torchcompile-mode",), {"type": str, "default": None, "help": "torch.compile mode (default: None)."}),
    (("--pin-mem",), {"action": "store_true", "help": "Pin CPU memory in DataLoader for more efficient transfer"}),
    (("-j", "--workers"), {"type": int, "default": 4, "help": "how many training processes to use (default: 4)"}),
    (("--fast-norm",), {"action": "store_true", "help": "enable experimental fast-norm"}),
    (("--grad-checkpointing",), {"action": "store_true"}),
    (("--output",), {"default": "", "type": str, "help": "path to output folder"}),
)


def _plain(device: str = "cpu", command: tuple[str, ...] = ("python", "train.py"), *parsers: dict) -> dict:
    given = {"engine": False, "framework": "plain", "resolved_device": device, "parsers": list(parsers)}
    variants, skipped = framework_ablation(given, list(command))
    return {v.name: v.overrides for v in variants}, skipped


def test_timms_switches_are_found_by_name_and_switched_by_presence(monkeypatch):
    monkeypatch.setenv("ACCEL_CPU_BF16", "1")
    devices.cpu_has_native_bf16.cache_clear()
    variants, skipped = _plain("cpu", ("python", "train.py"), _parser(*TIMM, argv=("--channels-last",)))
    # amp runs in bf16 through the script's own dtype option; channels-last, given on, is switched off
    assert variants["--amp=present,--amp-dtype=bfloat16"] == {"arg:--amp": "present", "arg:--amp-dtype": "bfloat16"}
    assert variants["--channels-last=absent"] == {"arg:--channels-last": "absent"}
    assert variants["--workers=0"] == {"arg:--workers": "0"}  # its 4 workers against none
    for name in ("--torchcompile=present", "--fast-norm=present", "--grad-checkpointing=present"):
        assert name in variants
    assert skipped == {"--pin-mem=present": "needs a CUDA GPU (this script trains on cpu)"}
    assert not any("dtype" in name.split(",")[0] or "output" in name for name in variants)
    devices.cpu_has_native_bf16.cache_clear()


def test_mixed_precision_in_bf16_is_left_out_where_the_cpu_emulates_bf16(monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    _, skipped = _plain("cpu", ("python", "train.py"), _parser(*TIMM))
    assert "no native bf16" in skipped["--amp=present,--amp-dtype=bfloat16"]
    variants, _ = _plain("cuda:0", ("python", "train.py"), _parser(*TIMM))
    assert "--amp=present,--amp-dtype=bfloat16" in variants and "--pin-mem=present" in variants


def test_the_common_spellings_of_other_scripts_are_found(monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    torchvision = _parser(
        (("--amp",), {"action": "store_true", "help": "Use torch.cuda.amp for mixed precision training"}),
        (("--use-deterministic-algorithms",), {"action": "store_true"}),
        (("--workers", "-j"), {"type": int, "default": 16}),
        argv=("--use-deterministic-algorithms",),
    )
    variants, skipped = _plain("cpu", ("python", "train.py"), torchvision)
    assert "its dtype is the script's own" in skipped["--amp=present"]  # no dtype option: fp16, CUDA only
    assert variants["--use-deterministic-algorithms=absent"] == {"arg:--use-deterministic-algorithms": "absent"}
    fairseq = _parser(
        (("--fp16",), {"action": "store_true"}),
        (("--bf16",), {"action": "store_true"}),
        (("--compile", "--no-compile"), {"action": argparse.BooleanOptionalAction, "default": True}),
        (("--mixed",), {"type": int, "default": 0, "help": "unrelated"}),
        (("--cl",), {"action": "store_true", "help": "convert the model to channels_last"}),  # by its help text
    )
    variants, skipped = _plain("cpu", ("python", "train.py"), fairseq)
    assert "--bf16=present" in variants and "--fp16=present" in skipped
    assert variants["--no-compile=present"] == {"arg:--no-compile": "present"}  # on as given: off by --no-compile
    assert "--cl=present" in variants and "--mixed=0" not in variants  # an int named `mixed`: not a switch
    # nanoGPT parses its command line itself: its valued options are read from the command
    variants, _ = _plain("cpu", ("python", "train.py", "config.py", "--compile=True", "--dtype=float32"))
    assert variants["--compile=False"] == {"arg:--compile": "False"}
    assert variants["--dtype=bfloat16"] == {"arg:--dtype": "bfloat16"}


def test_a_plain_script_without_speed_switches_is_told_how_to_compare_its_options():
    parser = _parser((("--lr",), {"type": float, "default": 0.1}))
    with pytest.raises(AccelError, match="takes none that accel knows .*arg:--OPTION=absent,present"):
        _plain("cpu", ("python", "train.py"), parser)


def test_a_frameworks_bf16_is_left_out_where_the_cpu_emulates_bf16_as_a_plain_scripts_is(monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    for framework, flags, bf16 in (
        ("hf", HF_DEFAULTS, "--bf16=True"),
        ("lightning", {"trainer.precision": "32-true"}, "--trainer.precision=bf16-mixed"),
    ):
        given = {"framework": framework, "command_line": True, "resolved_device": "cpu", "flags": flags}
        variants, skipped = framework_ablation(given, ["python", "train.py"])
        assert bf16 not in {v.name for v in variants} and "no native bf16" in skipped[bf16], framework
