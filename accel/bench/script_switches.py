"""The speed switches a plain script takes on its own command line, found by their meaning: what `accel bench
--ablate` and `accel tune` switch on a script without an accel.Engine or a framework's Trainer
(accel/bench/script_flags.py turns each into a `Flag`, as the HF Trainer's are).

The options come from the script's argparse parsers (accel/bench/script_options.py) or, for a script that parses
its command line itself (nanoGPT's configurator), from the `--key=value` options its command gives. Each meaning
is matched by the option's name (timm's `--amp --amp-dtype --channels-last --torchcompile --pin-mem`, nanoGPT's
`--compile --dtype`, fairseq's `--fp16`, `--bf16`, torchvision's `--amp --use-deterministic-algorithms`), else by
its help text, and switched by the option's own kind: present/absent for a flag, `--no-x` for a
BooleanOptionalAction, True/False for a boolean value, a number or a dtype's spelling for a value.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..config.recipe_yaml import parse_value
from .script_options import ABSENT, PRESENT, Option, ScriptOptions, is_option

CUDA = "needs a CUDA GPU"
DTYPE = re.compile(r"(b?float|fp|bf|half)?(16|32)(-mixed|-true)?|half|float", re.IGNORECASE)  # a dtype's spelling


def cuda_only(device: str) -> str | None:
    return None if device.startswith("cuda") else f"{CUDA} (this script trains on {device})"


def no_fast_bf16(device: str, bf16_fast: bool) -> str | None:
    if device.startswith("cuda") or bf16_fast:
        return None
    return f"this {device} has no native bf16 (emulated, slower than fp32)"


@dataclass(frozen=True)
class Meaning:
    what: str
    names: str  # a regular expression the option's name (lower case, `_` for `-`, no dashes) must match whole
    help: str | None = None  # one its help text may match instead
    cuda: bool = False  # runs on a CUDA GPU only
    only_to_remove: bool = False  # a switch that slows (deterministic algorithms): switched only where given on


MEANINGS = (
    Meaning("bf16 mixed precision", r"(use_)?(bf16|bfloat16)(_mixed|_amp)?"),
    Meaning("fp16 mixed precision", r"(use_)?(fp16|half|float16)(_mixed|_amp)?", cuda=True),
    Meaning("mixed precision", r"(use_)?(amp|autocast|mixed_precision|mixed)", r"mixed[- ]precision|\bautocast\b"),
    Meaning("channels-last", r"(use_)?channels?_last(_memory)?", r"channels[_ ]last"),
    Meaning("torch.compile", r"(use_)?(torch_?)?compiled?(_model)?", r"torch\.compile\b"),
    Meaning("pinned memory", r"(use_|dataloader_)?pin(ned)?_mem(ory)?", r"\bpin(ned)?\b.*\bmemory\b", cuda=True),
    Meaning("loader workers", r"(num_|data_|loader_|dataloader_(num_)?)?workers"),
    Meaning(
        "a fused or foreach optimizer", r"(use_)?(fused|foreach)(_(adam|adamw|optim|optimizer))?|opt_(fused|foreach)"
    ),
    Meaning("TF32 matmuls", r"(allow_|use_)?tf32", cuda=True),
    Meaning("gradient checkpointing", r"(grad|gradient|activation)_checkpointing|checkpoint_activations"),
    Meaning("fused kernels", r"fast_norm|(use_)?(flash_attn|flash_attention|liger_kernel|fused_kernels)"),
    Meaning("deterministic algorithms off", r"(use_)?deterministic(_algorithms)?", only_to_remove=True),
)
DTYPE_NAMES = re.compile(r"(amp_|autocast_|mixed_)?(dtype|precision)")  # a mixed precision's dtype as a value


@dataclass(frozen=True)
class Switch:
    """One speed switch found: its meaning, the option it came from and how it matched, the option switched (no
    dashes) with its values on and off and as given, and why it cannot run here (None: it can)."""

    meaning: str
    source: Option
    matched: str  # "name" or "help text"
    name: str
    on: Any
    off: Any
    given: Any
    cannot: str | None = None
    needs: dict[str, str] = field(default_factory=dict)  # other options it needs on here (`--amp-dtype bfloat16`)

    def spelled(self) -> str:
        """The switch turned on, as the script's command line says it (`--amp --amp-dtype bfloat16`)."""
        flag = {PRESENT: f"--{self.name}", ABSENT: f"without --{self.name}"}.get(self.on, f"--{self.name}={self.on}")
        return " ".join([flag, *self._needs_said()])

    def said(self) -> str:
        needs = "".join(f" {need}" for need in self._needs_said())
        helped = f" {self.source.help!r}" if self.source.help else ""
        return f"--{self.name}{needs} ({self.meaning}): {self.source.name}{helped}, by its {self.matched}"

    def _needs_said(self) -> list[str]:
        return [f"without {option}" if value == ABSENT else f"{option} {value}" for option, value in self.needs.items()]


def options_of(command: list[str]) -> dict[str, Any]:
    """The script's `--option value` and `--option=value` pairs, typed as YAML (flags without a value: none)."""
    found: dict[str, Any] = {}
    for i, token in enumerate(command):
        if not token.startswith("--") or token == "--":
            continue
        name, sep, text = token.partition("=")
        if sep:
            found[name] = parse_value(text)
        elif i + 1 < len(command) and not is_option(command[i + 1]):
            found[name] = parse_value(command[i + 1])
    return found


def script_options(given: dict[str, Any], command: list[str]) -> list[Option]:
    """The script's options: its parsers', or without one, the valued options its command gives (nanoGPT)."""
    options = ScriptOptions.of(given)
    if options is not None:
        return [o for o in options.options if o.name.startswith("--")]
    return [Option((name,), name[2:], "store", value=value) for name, value in options_of(command).items()]


def switches(options: list[Option], device: str, bf16_fast: bool) -> tuple[list[Switch], dict[str, str]]:
    """The speed switches among `options`, and the options that mean one but cannot be switched, with why."""
    found, left = [], {}
    dtype = next((o for o in options if _dtype_option(o)), None)
    for option in options:
        if option is dtype:
            continue  # the dtype of a mixed precision flag, or the precision itself (below)
        meaning, matched = _meaning(option)
        if meaning is None:
            continue
        switch = _switch(option, meaning, matched)
        if switch is None:
            left[option.name] = f"means {meaning.what}, but takes a value accel cannot choose"
            continue
        if meaning.only_to_remove and switch.given != switch.off:
            continue  # already off: nothing to gain
        found.append(_beside_given(_here(switch, meaning, dtype, device, bf16_fast), options))
    if dtype is not None and not any(s.meaning == "mixed precision" for s in found):
        found.append(_dtype_switch(dtype, device, bf16_fast))  # nanoGPT's --dtype: the precision itself
    return found, left


def _meaning(option: Option) -> tuple[Meaning | None, str]:
    name = _plain_name(option)
    for meaning in MEANINGS:
        if re.fullmatch(meaning.names, name):
            return meaning, "name"
    for meaning in MEANINGS:
        if meaning.help and option.help and re.search(meaning.help, option.help, re.IGNORECASE):
            return meaning, "help text"
    return None, ""


def _plain_name(option: Option) -> str:
    return option.name.lstrip("-").lower().replace("-", "_")


def _switch(option: Option, meaning: Meaning, matched: str) -> Switch | None:
    """How `option` switches its meaning on and off, by its kind; None where it takes a value accel cannot
    choose."""
    name = option.name[2:]
    value = option.value
    if meaning.what == "loader workers":
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        return Switch(meaning.what, option, matched, name, min(4, os.cpu_count() or 1), 0, value)
    if option.kind == "store_true" or (option.kind == "store" and option.nargs == "?" and option.const is not None):
        given_on = value is True if option.kind == "store_true" else value not in (None, option.default)
        state = PRESENT if given_on else ABSENT
        on, off = (ABSENT, PRESENT) if meaning.only_to_remove else (PRESENT, ABSENT)
        return Switch(meaning.what, option, matched, name, on, off, state)
    if option.kind == "store_false":
        return Switch(meaning.what, option, matched, name, ABSENT, PRESENT, PRESENT if value is False else ABSENT)
    if option.kind == "boolean_optional":
        if value:  # on as given: switched off by its --no- spelling
            negated = next((o for o in option.options if o.startswith("--no-")), f"--no-{name}")
            return Switch(meaning.what, option, matched, negated[2:], ABSENT, PRESENT, ABSENT)
        return Switch(meaning.what, option, matched, name, PRESENT, ABSENT, ABSENT)
    if isinstance(value, bool):  # --compile=True: a boolean by value
        return Switch(meaning.what, option, matched, name, True, False, value)
    return None


def _beside_given(switch: Switch, options: list[Option]) -> Switch:
    """A switch turned on beside an option of its mutually exclusive group that the command gives (`--bf16` where
    `--fp16` is given): that option goes, since the script's parser refuses the two together."""
    given = [o for o in options if o.options[0] in switch.source.exclusive and o.given_on]
    if switch.on == ABSENT or not given:
        return switch
    return Switch(**{**vars(switch), "needs": {**switch.needs, **dict.fromkeys((o.name for o in given), ABSENT)}})


def _dtype_option(option: Option) -> bool:
    texts = [option.value, option.default, *(option.choices or ())]
    return bool(re.fullmatch(DTYPE_NAMES, _plain_name(option))) and any(
        isinstance(t, str) and DTYPE.fullmatch(t) for t in texts
    )


def _bf16_spelling(option: Option) -> str:
    """bf16 as the option spells its dtypes: one of its choices, else as its value does (`bfloat16`, `bf16`)."""
    for choice in option.choices or ():
        if isinstance(choice, str) and re.fullmatch(r"b(f|float)16(-mixed)?", choice):
            return choice
    return "bf16" if re.match(r"(fp|bf)", str(option.value or option.default or "")) else "bfloat16"


def _fp32_spelling(option: Option) -> str:
    for choice in option.choices or ():
        if isinstance(choice, str) and re.fullmatch(r"(fp|float)32(-true)?|32(-true)?", choice):
            return choice
    return "fp32" if re.match(r"(fp|bf)", str(option.value or option.default or "")) else "float32"


def _here(switch: Switch, meaning: Meaning, dtype: Option | None, device: str, bf16_fast: bool) -> Switch:
    """The switch with what it needs and cannot do on this device: mixed precision by a flag runs in bf16 where
    the script has a dtype option (else in its own dtype, fp16 by the usual default: CUDA only)."""
    cannot, needs = cuda_only(device) if meaning.cuda else None, {}
    if meaning.what == "bf16 mixed precision":
        cannot = no_fast_bf16(device, bf16_fast)
    if meaning.what == "mixed precision":
        if dtype is None:
            cannot = cuda_only(device) and f"its dtype is the script's own (fp16 by the usual default): {CUDA}"
        else:
            needs = {dtype.name: _bf16_spelling(dtype)}
            cannot = no_fast_bf16(device, bf16_fast)
    return Switch(**{**vars(switch), "cannot": cannot, "needs": needs})


def _dtype_switch(option: Option, device: str, bf16_fast: bool) -> Switch:
    """A dtype option that is the script's precision itself: bf16 on, fp32 off."""
    on, off = _bf16_spelling(option), _fp32_spelling(option)
    given = option.value if option.value is not None else option.default
    cannot = no_fast_bf16(device, bf16_fast)
    return Switch("mixed precision", option, "name", option.name[2:], on, off, given, cannot)
