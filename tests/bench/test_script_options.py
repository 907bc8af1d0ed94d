"""A plain script's own options, read from its argparse parser in the probe: how a variant sets one (a flag by its
presence, several values as words) and the parser's own refusal of a variant, before any trial."""

from __future__ import annotations

import argparse

import pytest

from accel.bench.instrument import parsers
from accel.bench.script import with_option
from accel.bench.script_options import ScriptOptions


@pytest.fixture
def watched(monkeypatch):
    """argparse as a trial's instrument leaves it (put back after the test)."""
    for name in ("parse_args", "parse_known_args"):
        monkeypatch.setattr(argparse.ArgumentParser, name, getattr(argparse.ArgumentParser, name))
    monkeypatch.setattr(parsers, "PARSERS", {})
    parsers.watch()


def _timm_like() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--opt-betas", type=float, nargs="+")
    parser.add_argument("--amp-dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("-b", "--batch-size", type=int, default=8)
    parser.add_argument("--torchcompile", nargs="?", const="inductor")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("fit").add_argument("--deep", type=int)
    return parser


def test_the_scripts_parsers_are_recorded_as_it_parses_and_it_gets_what_it_would_have(watched):
    config = argparse.ArgumentParser(add_help=False)  # timm parses twice: a config file's option, then its own
    config.add_argument("-c", "--config", default="")
    known, rest = config.parse_known_args(["-b", "4", "--channels-last", "fit", "--deep", "2"])
    args = _timm_like().parse_args(rest)
    assert (known.config, args.batch_size, args.channels_last, args.deep) == ("", 4, True, 2)
    first, second = parsers.captured()  # the subcommand's parser is parsed inside its parent's: not recorded
    assert not first["strict"] and second["strict"] and second["prog"] == "train.py"
    actions = {action["options"][0]: action for action in second["actions"]}
    assert actions["--channels-last"] | {"help": None} == {
        "options": ["--channels-last"], "dest": "channels_last", "kind": "store_true", "nargs": 0, "const": True,
        "choices": None, "type": None, "default": False, "value": True, "help": None,
    }  # fmt: skip
    assert actions["--pin"]["kind"] == "boolean_optional" and actions["--pin"]["options"] == ["--pin", "--no-pin"]
    assert actions["--amp-dtype"]["choices"] == ["float16", "bfloat16"] and actions["-b"]["type"] == "int"


def test_a_variant_the_scripts_parser_refuses_is_told_in_its_own_words(watched):
    _timm_like().parse_args([])
    options = ScriptOptions(parsers.captured())
    assert options.refusal({"--channels-last": "True"}) == (
        "train.py: error: argument --channels-last: ignored explicit argument 'True'"
    )
    assert "invalid choice: 'bf16'" in options.refusal({"--amp-dtype": "bf16"})
    assert "invalid int value: 'x'" in options.refusal({"-b": "x"})
    assert "unrecognized arguments: --nope=1" in options.refusal({"--nope": "1"})
    for taken in ({"--channels-last": "present"}, {"--no-pin": "present"}, {"--opt-betas": "0.9 0.99"}):
        assert options.refusal(taken) is None
    assert options.refusal({"--torchcompile": "present", "--amp-dtype": "bfloat16", "-b": None}) is None


def test_an_option_is_switched_by_presence_and_several_values_go_as_words(watched):
    _timm_like().parse_args([])
    options = ScriptOptions(parsers.captured())
    command = ["python", "train.py", "--channels-last", "--opt-betas", "0.1", "0.2", "--torchcompile", "x", "-b", "4"]
    assert with_option(command, "--channels-last", "absent", options) == [
        "python", "train.py", "--opt-betas", "0.1", "0.2", "--torchcompile", "x", "-b", "4",
    ]  # fmt: skip
    assert with_option(command, "--opt-betas", "0.9 0.99", options)[-5:] == ["-b", "4", "--opt-betas", "0.9", "0.99"]
    assert with_option(command, "--torchcompile", "absent", options) == [
        "python", "train.py", "--channels-last", "--opt-betas", "0.1", "0.2", "-b", "4",
    ]  # fmt: skip
    assert with_option(["python", "t.py", "--amp"], "--no-pin", "present", options) == [
        "python", "t.py", "--amp", "--no-pin",
    ]  # fmt: skip
    # without a parser (nanoGPT's configurator): a flag's presence, the option's neighbours untouched
    assert with_option(["python", "t.py", "--amp", "a.py"], "--amp", "absent") == ["python", "t.py", "a.py"]


def test_a_trials_output_options_point_into_a_folder_of_its_own(watched, tmp_path, capsys):
    """timm makes a run folder under its --output in every probe and trial: there they go to the process's own
    folder, under the same name; options that are not outputs, and an output left empty, are as given."""
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--output", default="")
    parser.add_argument("--output-dir")
    parser.add_argument("--data-dir")
    parser.add_argument("--experiment", default="exp1")
    given = str(tmp_path / "out_timm")
    args = parser.parse_args(["--output", given, "--data-dir", str(tmp_path / "imgs")])
    assert args.output != given and args.output.endswith("/output/out_timm") and not args.output.startswith(given)
    assert args.data_dir == str(tmp_path / "imgs") and args.experiment == "exp1" and args.output_dir is None
    assert f"not to --output {given}" in capsys.readouterr().err
    assert parser.parse_args([]).output == ""  # not given: the script's own default, untouched
