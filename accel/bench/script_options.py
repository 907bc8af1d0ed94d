"""A plain script's own options, as its argparse parsers declare them (recorded in the probe by
accel/bench/instrument/parsers.py): how a variant's `arg:--OPTION` value goes on its command line, and whether the
script's parser takes it, asked of a parser rebuilt from the recorded options, before any trial runs.

`present` and `absent` switch an option by its presence (a `store_true` flag, `--no-x` of a BooleanOptionalAction,
an optional value's const); a value with spaces is several values where the option takes several (`nargs`). Options
of one mutually exclusive group are rebuilt as one, so a variant that would give two of them is refused in argparse's
words, counting those the command gives and the variant keeps."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

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
