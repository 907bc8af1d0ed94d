"""The speed flags a script already takes on its command line: what `accel bench --ablate` tries on a script
without an `accel.Engine`. For a Hugging Face Trainer script, the Trainer's own flags (TrainingArguments); for a
LightningCLI script, the Trainer's `--trainer.precision`; for any other script, the speed switches found by their
meaning among its own options (accel/bench/script_switches.py). Each is switched against the script as given, where
the device supports it and the installed packages allow it; a flag that cannot run here is skipped with its reason.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AccelError
from .knobs import Knob
from .script_switches import Switch, cuda_only, no_fast_bf16, script_options, switches
from .variants import ARG, Variant


@dataclass(frozen=True)
class Flag:
    """One of a Trainer's speed flags: its value on and off, and why it cannot run here (None: it can)."""

    name: str
    on: Any
    off: Any
    cannot: Callable[[str, dict[str, Any]], str | None] = lambda device, given: None
    needs: Callable[[str, dict[str, Any]], dict[str, Any]] = lambda device, flags: {}  # other options it needs here
    shows_needs: bool = False  # the variant's name says what it needs too (`--amp=present,--amp-dtype=bfloat16`)

    @property
    def key(self) -> str:
        return f"{ARG}--{self.name}"

    def given_on(self, flags: dict[str, Any]) -> bool:
        """Whether the script has it on: set to anything but off (a script's 8 loader workers, not only accel's 4)."""
        return flags.get(self.name) not in (self.off, None)

    def switched(self, flags: dict[str, Any]) -> Any:
        """The flag switched from its given value: on where it was off, and off where it was on."""
        return self.off if self.given_on(flags) else self.on

    def variant(self, device: str, flags: dict[str, Any]) -> Variant:
        text = str(self.switched(flags))
        needs = {key: str(value) for key, value in self.needs(device, flags).items()}
        said = [f"{key[len(ARG) :]}={value}" for key, value in needs.items()] if self.shows_needs else []
        return Variant(",".join([f"--{self.name}={text}", *said]), {self.key: text, **needs})

    @classmethod
    def of(cls, switch: Switch) -> Flag:
        """A plain script's speed switch, as a Trainer's flag."""
        needs = {f"{ARG}{option}": value for option, value in switch.needs.items()}
        return cls(switch.name, switch.on, switch.off, lambda d, g: switch.cannot, lambda d, f: needs, bool(needs))


def _cuda_only(device: str, given: dict[str, Any]) -> str | None:
    return cuda_only(device)


def _liger(device: str, given: dict[str, Any]) -> str | None:
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed (pip install liger-kernel)"
    return _cuda_only(device, given)


def _adamw(device: str, given: dict[str, Any]) -> str | None:
    optim = str(given["flags"].get("optim") or "")
    if not optim.startswith("adamw_torch"):
        return f"the script's optimizer is {optim}: a fused AdamW would change the optimizer, not its speed"
    return None


def _fp16(device: str, given: dict[str, Any]) -> str | None:
    if given["flags"].get("bf16"):
        return "the script trains in bf16 already"
    return _cuda_only(device, given)


def _fast_bf16(device: str) -> str | None:
    """Why bf16 would be slower than fp32 here, as a plain script's bf16 switch is refused (script_switches)."""
    from ..devices import cpu_has_native_bf16

    return no_fast_bf16(device, device == "cpu" and cpu_has_native_bf16())


def _bf16(device: str, given: dict[str, Any]) -> str | None:
    return "the script trains in fp16 already" if given["flags"].get("fp16") else _fast_bf16(device)


def _use_cpu(device: str, flags: dict[str, Any]) -> dict[str, str]:
    """The Trainer refuses bf16 on a CPU unless told the CPU is meant (`--use_cpu True`)."""
    return {f"{ARG}--use_cpu": True} if device == "cpu" and not flags.get("use_cpu") else {}


HF_FLAGS = (
    Flag("bf16", True, False, _bf16, _use_cpu),
    Flag("fp16", True, False, _fp16),
    Flag("tf32", True, False, _cuda_only),
    Flag("torch_compile", True, False),
    Flag("optim", "adamw_torch_fused", "adamw_torch", _adamw),
    Flag("dataloader_num_workers", min(4, os.cpu_count() or 1), 0),
    Flag("dataloader_pin_memory", True, False, _cuda_only),
    Flag("gradient_checkpointing", True, False),
    Flag("use_liger_kernel", True, False, _liger),
)


def _bf16_mixed(device: str, given: dict[str, Any]) -> str | None:
    return _other_precision(given) or _fast_bf16(device)


def _fp16_mixed(device: str, given: dict[str, Any]) -> str | None:
    return _other_precision(given) or _cuda_only(device, given)


def _other_precision(given: dict[str, Any]) -> str | None:
    precision = given["flags"].get("trainer.precision")
    return f"the script trains in {precision} already" if precision not in ("32-true", "bf16-mixed") else None


LIGHTNING_FLAGS = (
    Flag("trainer.precision", "bf16-mixed", "32-true", _bf16_mixed),
    Flag("trainer.precision", "16-mixed", "32-true", _fp16_mixed),
)
FRAMEWORKS = {
    "hf": (HF_FLAGS, "parse TrainingArguments from it (HfArgumentParser)"),
    "lightning": (LIGHTNING_FLAGS, "build its Trainer through LightningCLI"),
}


def plain_switches(given: dict[str, Any], command: list[str]) -> tuple[list[Switch], dict[str, str]]:
    """The speed switches among a plain script's own options, and the options meaning one that cannot be
    switched, with why."""
    device = given["resolved_device"]
    return switches(script_options(given, command), device, _fast_bf16(device) is None)


def known_flags(given: dict[str, Any], command: list[str], what: str) -> tuple[Sequence[Flag], dict[str, Any]]:
    """The flags a script takes on its command line (its Trainer's, or its own speed switches), and their values
    as given; an error where it takes none. `what` (--ablate, tune) needs them."""
    if given.get("framework") not in FRAMEWORKS:
        found, _ = plain_switches(given, command)
        if not found:
            raise AccelError(
                f"{what} switches a script's speed flags, and `{shlex.join(command)}` takes none that accel knows "
                "(mixed precision, channels-last, compile, pinned memory, workers, a fused optimizer, TF32, gradient "
                "checkpointing) and creates no accel.Engine: compare its own options with --vary arg:--OPTION=V1,V2 "
                "(a flag: arg:--OPTION=absent,present), or environment variables with --vary env:NAME=V1,V2."
            )
        return [Flag.of(switch) for switch in found], {switch.name: switch.given for switch in found}
    known, parses = FRAMEWORKS[given["framework"]]
    if not given.get("command_line"):
        raise AccelError(
            f"{what} switches a Trainer script's own flags on its command line, and `{shlex.join(command)}` does not "
            f"{parses}: compare what it does take with --vary arg:--OPTION=V1,V2."
        )
    return known, given["flags"]


def given_flags(given: dict[str, Any], command: list[str]) -> dict[str, Any]:
    """The script's flags (its Trainer's, or its own speed switches) as given, by name."""
    if given.get("framework") in FRAMEWORKS:
        return given.get("flags") or {}
    return {switch.name: switch.given for switch in plain_switches(given, command)[0]}


def found_said(given: dict[str, Any], command: list[str]) -> list[str]:
    """What `--ablate --list` says of a plain script's switches: each found, from which option and how it matched,
    and each left out, with why."""
    if given.get("framework") in FRAMEWORKS:
        return []
    found, left = plain_switches(given, command)
    lines = [f"found {switch.said()}" + (f"; not run: {switch.cannot}" if switch.cannot else "") for switch in found]
    return lines + [f"left out {name}: {why}" for name, why in left.items()]


def switched_flags(
    given: dict[str, Any], command: list[str], what: str
) -> tuple[list[Flag], dict[str, str], dict[str, Any]]:
    """The flags the script takes on its command line that can be switched here; those that cannot, by their
    variant's name, with why; and every flag's value as given."""
    known, flags = known_flags(given, command, what)
    device, given = given["resolved_device"], given | {"flags": flags}
    runnable, skipped, seen = [], {}, set()
    for flag in known:
        name = flag.variant(device, flags).name
        if name in seen:
            continue  # two flags of one option switch back to the same value as given
        seen.add(name)
        reason = flag.cannot(device, given) if flag.name in flags else "this version's Trainer has no such flag"
        if reason and not flag.given_on(flags):  # a flag the script has on can always be turned off
            skipped[name] = reason
        else:
            runnable.append(flag)
    return runnable, skipped, flags


def framework_ablation(given: dict[str, Any], command: list[str]) -> tuple[list[Variant], dict[str, str]]:
    """The script as given, then each of its flags switched; and the flags skipped, with why."""
    runnable, skipped, flags = switched_flags(given, command, "--ablate")
    device = given["resolved_device"]
    return [Variant("baseline"), *(flag.variant(device, flags) for flag in runnable)], skipped


def flag_knobs(given: dict[str, Any], command: list[str]) -> tuple[list[Knob], dict[str, str]]:
    """tune's knobs over the script's flags: one per option, its values those it can be switched to here (a
    speed flag, guarded: it must leave the training loss as it was); and the flags skipped, with why."""
    runnable, skipped, flags = switched_flags(given, command, "accel tune")
    device = given["resolved_device"]
    by_key: dict[str, list[Flag]] = {}
    for flag in runnable:
        by_key.setdefault(flag.key, []).append(flag)
    knobs = []
    for key, options in by_key.items():
        needs = {flag.switched(flags): flag.needs(device, flags) for flag in options}
        knobs.append(Knob(key, list(needs), guard=True, couple=lambda value, chosen, plain, n=needs: n.get(value, {})))
    return knobs, skipped
