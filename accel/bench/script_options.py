"""A plain script's own options, as its argparse parsers declare them (recorded in the probe by
accel/trial/instrument/parsers.py): how a variant's `arg:--OPTION` value goes on its command line, and whether the
script's parser takes it, asked of a parser rebuilt from the recorded options, before any trial runs.

`present` and `absent` switch an option by its presence (a `store_true` flag, `--no-x` of a BooleanOptionalAction,
an optional value's const); a value with spaces is several values where the option takes several (`nargs`). Options
of one mutually exclusive group are rebuilt as one, so a variant that would give two of them is refused in argparse's
words, counting those the command gives and the variant keeps."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from ..errors import AccelError
from .variants import ARG, option_text

PRESENT, ABSENT = "present", "absent"
TYPES = {None: None, "str": str, "int": int, "float": float}  # what a parser's own check can be rebuilt with


@dataclass(frozen=True)
class Option:
    """One option of the script's parser, as recorded: its spellings, kind (store_true, store_false,
    boolean_optional, flag, store), values, help, and the value the script got (`value`)."""

    options: tuple[str, ...]
    dest: str
    kind: str
    nargs: Any = None
    const: Any = None
    choices: tuple[Any, ...] | None = None
    type: str | None = None
    default: Any = None
    value: Any = None
    help: str | None = None
    exclusive: tuple[str, ...] = ()  # the other options of its mutually exclusive group, by their first spelling

    @classmethod
    def of(cls, data: dict[str, Any], exclusive: tuple[str, ...] = ()) -> Option:
        choices = data.get("choices")
        fields = {"options": tuple(data["options"]), "choices": tuple(choices) if choices else None}
        return cls(**(data | fields), exclusive=exclusive)

    @property
    def name(self) -> str:
        """Its long spelling (`--channels-last`), else its first."""
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    @property
    def takes_values(self) -> bool:
        return self.nargs != 0

    @property
    def many(self) -> bool:
        return self.nargs in ("+", "*", argparse.REMAINDER) or (isinstance(self.nargs, int) and self.nargs > 1)

    @property
    def given_on(self) -> bool:
        """Whether the script got something other than the option's default: its command gives it."""
        return self.value != self.default

    def given_words(self) -> list[str]:
        """The option as the command gives it, in the form `tokens` writes."""
        if not self.takes_values:
            return [self.name]
        text = " ".join(map(str, self.value)) if isinstance(self.value, list) else str(self.value)
        return tokens(self.name, text, self)


class ScriptOptions:
    """The options of every parser the script parsed its command line with (timm parses twice: a config parser's
    known options, then its own)."""

    def __init__(self, parsers: list[dict[str, Any]]):
        self.parsers = parsers
        self.options = [
            Option.of(action, _others(action, parser.get("exclusive", [])))
            for parser in parsers
            for action in parser["actions"]
        ]

    @classmethod
    def of(cls, given: dict[str, Any]) -> ScriptOptions | None:
        """From the probe's answer; None where the script parsed no command line with argparse."""
        parsers = given.get("parsers") or []
        return cls(parsers) if parsers else None

    def find(self, spelling: str) -> Option | None:
        return next((o for o in reversed(self.options) if spelling in o.options), None)

    def spellings(self) -> frozenset[str]:
        return frozenset(spelling for option in self.options for spelling in option.options)

    def refusal(self, settings: dict[str, str | None]) -> str | None:
        """What the script's parser says of these `{--OPTION: value}` settings (its own words, `train.py: error:
        argument --channels-last: ignored explicit argument 'True'`, `argument --bf16: not allowed with argument
        --fp16`), or None where it takes them."""
        words = [word for option in self._kept_beside(settings) for word in option.given_words()]  # the command's
        words += [word for spelling, value in settings.items() for word in tokens(spelling, value, self.find(spelling))]
        parser = self._rebuilt()
        try:
            if any(p["strict"] for p in self.parsers):
                parser.parse_args(words)
            else:
                parser.parse_known_args(words)
        except _Refused as refused:
            return str(refused)
        return None

    def variant_refusal(self, overrides: dict[str, Any]) -> str | None:
        """What the parser says of a variant's `arg:--OPTION` values (its other keys are not the parser's)."""
        settings = {
            key[len(ARG) :]: None if value is None else option_text(value)
            for key, value in overrides.items()
            if key.startswith(ARG)
        }
        return self.refusal(settings) if settings else None

    def _kept_beside(self, settings: dict[str, str | None]) -> list[Option]:
        """The options the command gives that share a mutually exclusive group with one the settings set, and that
        the settings leave as given."""
        named = [option for spelling in settings if (option := self.find(spelling)) is not None]
        set_first = {option.options[0] for option in named}
        return [
            option
            for option in self.options
            if option.given_on and option.options[0] not in set_first and set_first & set(option.exclusive)
        ]

    def _rebuilt(self) -> argparse.ArgumentParser:
        """The script's options in one parser, nothing required: only the variant's own settings are asked of it
        (the rest of the command is the script as given, which the probe ran). A value's type or choices are checked
        where the script's check can be rebuilt (int, float, str)."""
        last = self.parsers[-1]
        parser = _Parser(
            prog=last["prog"], add_help=False, conflict_handler="resolve", prefix_chars=last["prefix_chars"]
        )
        groups = {}
        for option in self.options:
            if option.exclusive and option.options[0] not in groups:
                group = parser.add_mutually_exclusive_group()
                groups |= dict.fromkeys([option.options[0], *option.exclusive], group)
        for option in self.options:
            holder = groups.get(option.options[0], parser)
            if not option.takes_values:
                holder.add_argument(*option.options, dest=option.dest, action="store_true")
                continue
            known = option.type in TYPES
            try:
                holder.add_argument(
                    *option.options,
                    dest=option.dest,
                    nargs=option.nargs,
                    const=option.const if option.nargs == "?" else None,
                    type=TYPES.get(option.type),
                    choices=option.choices if known else None,
                )
            except ValueError:  # a custom action's nargs that argparse's own store refuses: any values
                holder.add_argument(*option.options, dest=option.dest, nargs="*")
        return parser


def _others(action: dict[str, Any], groups: list[list[str]]) -> tuple[str, ...]:
    """The other options of the action's mutually exclusive group (none: it is in none)."""
    first = action["options"][0]
    return tuple(other for group in groups if first in group for other in group if other != first)


def with_option(command: list[str], option: str, value: str, options: ScriptOptions | None = None) -> list[str]:
    """`command` with the script's `option` set to `value`: replaced where given by any of its spellings (`-b 8`,
    `--batch 8`, `--batch=8`, `-b8`: its parser's aliases, where known), every time it is given (a parser takes the
    last, so replacing only the first would leave every variant the same), appended where not: a long option as
    `--batch=8`, the one form every parser reads (argparse, HfArgumentParser, jsonargparse, and nanoGPT's
    configurator, which takes nothing else). `present` and `absent` switch it by its presence; an option of
    several values (`nargs`, from the script's parser) takes them as separate words."""
    if not option.startswith("-"):
        raise AccelError(
            f"--vary {ARG}{option}: name the script's option with its dashes, e.g. --vary {ARG}--batch=16,32."
        )
    spec = options.find(option) if options else None
    spelled = _Spelled(spec.options if spec else (option,), spec, options.spellings() if options else frozenset())
    if value in (PRESENT, ABSENT) or (spec is not None and spec.many):
        return [*_without(command, spelled), *tokens(option, value, spec)]
    command, given = list(command), False
    for i, token in enumerate(command):
        spelling, attached = spelled.of(token)
        if spelling is None:
            continue
        if attached is not None:
            command[i], given = f"{spelling}{attached}{value}", True
        elif i + 1 < len(command):
            command[i + 1], given = value, True
    if given:
        return command
    return [*command, f"{option}={value}"] if option.startswith("--") else [*command, option, value]


@dataclass(frozen=True)
class _Spelled:
    """An option's spellings on a command line: `spellings` (its parser's aliases, or the one given), `spec` (its
    parser's record, if known) and `taken` (every spelling the parser knows: `-bs` is its own option, not `-b s`)."""

    spellings: tuple[str, ...]
    spec: Option | None
    taken: frozenset[str]

    def of(self, token: str) -> tuple[str | None, str | None]:
        """Which of the spellings `token` is (None: none), and what joins a value given in the same word to it
        (`=`, or "" for a short option's `-b8`; None: the value is the next word)."""
        for spelling in self.spellings:
            if token == spelling:
                return spelling, None
            if token.startswith(f"{spelling}="):
                return spelling, "="
            if self._attached(token, spelling):
                return spelling, ""
        return None, None

    def _attached(self, token: str, spelling: str) -> bool:
        short = len(spelling) == 2 and spelling[1] != "-"
        takes = self.spec is not None and self.spec.takes_values
        return short and takes and token.startswith(spelling) and len(token) > 2 and token not in self.taken


def _without(command: list[str], spelled: _Spelled) -> list[str]:
    """`command` without the option wherever given by one of its spellings, and the values it takes there (none
    where its parser is not known: a flag)."""
    kept, skipping = [], 0
    for token in command:
        spelling, attached = spelled.of(token)
        if spelling is not None:
            skipping = _values_after(spelled.spec) if attached is None else 0
        elif skipping and not is_option(token):
            skipping -= 1
        else:
            skipping = 0
            kept.append(token)
    return kept


def _values_after(spec: Option | None) -> float:
    """How many words after the option are its values, at most (the next option ends them)."""
    if spec is None or not spec.takes_values:
        return 0
    if isinstance(spec.nargs, int):
        return spec.nargs
    return math.inf if spec.many else 1


def tokens(spelling: str, value: str | None, option: Option | None) -> list[str]:
    """What a variant adds to the command line for `spelling` set to `value` (None, absent: nothing): the form
    every parser reads, `--batch=8` (nanoGPT's configurator takes nothing else); several values as words."""
    if value is None or value == ABSENT:
        return []
    if value == PRESENT:
        return [spelling]
    if option is not None and option.many:
        return [spelling, *value.split()]
    return [f"{spelling}={value}"] if spelling.startswith("--") else [spelling, value]


def is_option(token: str) -> bool:
    """Whether a command-line token is an option rather than a value (-1 and -1e-3 are values)."""
    try:
        float(token)
        return False
    except ValueError:
        return token.startswith("-")


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _Refused(f"{self.prog}: error: {message}")
