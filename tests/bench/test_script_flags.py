"""The Trainer flags an unchanged script's --ablate and tune switch, read from what the script was given."""

from __future__ import annotations

from accel.bench.script_flags import framework_ablation

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
        {"framework": "hf", "command_line": True, "resolved_device": "cpu", "flags": flags}, "python train.py"
    )
    return {v.name: v.overrides for v in variants}


def test_a_flag_the_script_sets_its_own_way_is_switched_off_not_to_accels_value():
    # a script's 8 loader workers are tried against none; accel's own number would compare 8 with 4
    assert "--dataloader_num_workers=0" in _variants(dataloader_num_workers=8)
    assert "--dataloader_num_workers=0" not in _variants()  # given none: tried with some
    assert "--bf16=False" in _variants(bf16=True) and "--bf16=True" in _variants()
