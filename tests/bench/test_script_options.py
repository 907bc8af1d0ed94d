"""A plain script's own options, read from its argparse parser in the probe: how a variant sets one (a flag by its
presence, several values as words) and the parser's own refusal of a variant, before any trial."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from accel.bench.records import Trial
from accel.bench.report import outputs_lines
from accel.bench.script import launch_of
from accel.bench.script_flags import Flag
from accel.bench.script_options import ScriptOptions, with_option
from accel.bench.script_switches import switches
from accel.bench.tune.script import UnchangedScript, _tries
from accel.errors import AccelError
from accel.trial.instrument import parsers


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


def test_an_option_given_by_another_spelling_is_replaced_not_given_twice(watched):
    """`-j 4` in the command and a variant's `--workers=8`: the script would see both (and an append action
    both values); every spelling its parser declares is the same option."""
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("-cl", "--channels-last", action="store_true")
    parser.add_argument("-c", "--crop", type=int, default=224)
    parser.parse_args([])
    options = ScriptOptions(parsers.captured())
    for given, set_to in ((["-j", "4"], ["-j", "8"]), (["-j4"], ["-j8"]), (["--workers=4"], ["--workers=8"])):
        assert with_option(["python", "t.py", *given, "-cl"], "--workers", "8", options) == [
            "python", "t.py", *set_to, "-cl",
        ]  # fmt: skip
    # `-cl` is an option of its own, not `-c l`
    assert with_option(["python", "t.py", "-cl", "-c32"], "--crop", "64", options) == ["python", "t.py", "-cl", "-c64"]
    assert with_option(["python", "t.py", "-cl", "-j", "4"], "--channels-last", "absent", options) == [
        "python", "t.py", "-j", "4",
    ]  # fmt: skip


def _precisions(given: list[str]) -> ScriptOptions:
    parser = argparse.ArgumentParser(prog="train.py")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--fp16", action="store_true")
    group.add_argument("--bf16", action="store_true")
    parser.add_argument("--amp-dtype", choices=["float16", "bfloat16"], default="float16")
    parsers.PARSERS.clear()
    parser.parse_args(given)
    return ScriptOptions(parsers.captured())


def test_two_options_of_one_mutually_exclusive_group_are_refused_in_the_parsers_words(watched):
    options = _precisions(["--fp16"])  # the command gives --fp16; a variant that keeps it cannot add --bf16
    said = "train.py: error: argument --bf16: not allowed with argument --fp16"
    assert options.refusal({"--bf16": "present"}) == said
    assert options.refusal({"--bf16": "present", "--fp16": "absent"}) is None
    assert options.variant_refusal({"arg:--fp16": "absent", "arg:--amp-dtype": "bfloat16"}) is None
    assert "not allowed with" in _precisions([]).refusal({"--bf16": "present", "--fp16": "present"})


def test_ablation_turns_one_of_a_group_on_in_place_of_the_one_given(watched):
    options = _precisions(["--fp16"])
    found, _ = switches(options.options, "cuda", True)
    bf16 = next(switch for switch in found if switch.name == "bf16")
    assert bf16.needs == {"--fp16": "absent"} and bf16.spelled() == "--bf16 without --fp16"
    variant = Flag.of(bf16).variant("cuda", {})
    assert variant.name == "--bf16=present,--fp16=absent" and options.variant_refusal(variant.overrides) is None
    assert launch_of(["python", "t.py", "--fp16"], [], variant, options).command == ("python", "t.py", "--bf16")


def test_a_tune_try_value_the_parser_refuses_stops_tune_before_any_trial(watched):
    parsed = _precisions(["--fp16"]).parsers
    given = {"engine": False, "framework": "plain", "resolved_device": "cpu", "parsers": parsed}
    subject = UnchangedScript(["python", "t.py", "--fp16"], [], given)
    with pytest.raises(AccelError, match="--try arg:--amp-dtype=bf16: .* invalid choice: 'bf16'"):
        _tries(subject, ["arg:--amp-dtype=bfloat16,bf16"])
    assert [k.values for k in _tries(subject, ["arg:--amp-dtype=bfloat16,float16"])] == [["bfloat16", "float16"]]
    assert subject.refusals({"arg:--bf16": "present"}) == [
        "the script's parser refuses it: train.py: error: argument --bf16: not allowed with argument --fp16"
    ]
    assert subject.refusals({"arg:--bf16": "present", "arg:--fp16": "absent"}) == []


def test_output_options_of_a_path_type_are_redirected_and_a_file_there_already_is_read_as_given(
    watched, tmp_path, monkeypatch
):
    monkeypatch.setattr(parsers, "REDIRECTED", {})
    start = tmp_path / "start.pt"
    start.write_bytes(b"weights")
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--output-dir", type=Path)
    parser.add_argument("--checkpoint-path")
    parser.add_argument("--output", action="store_true")  # a flag, not a place
    parser.add_argument("--log-dir", nargs="+")  # several places: left as given
    given = ["--output-dir", str(tmp_path / "out"), "--checkpoint-path", str(start), "--output", "--log-dir", "a"]
    args = parser.parse_args(given)
    assert isinstance(args.output_dir, Path) and args.output_dir.name == "out"
    assert tmp_path not in args.output_dir.parents
    assert (args.checkpoint_path, args.output, args.log_dir) == (str(start), True, ["a"])
    assert parsers.made() == {}  # the script has made nothing there yet
    (args.output_dir / "run-1").mkdir(parents=True)
    (args.output_dir / "run-1" / "args.yaml").write_text("lr: 0.1\n")
    made = {"--output-dir": {"given": str(tmp_path / "out"), "folders": 1, "files": 1}}
    assert parsers.made() == {"script_outputs": made}
    assert not (tmp_path / "out").exists()


def test_the_report_counts_what_the_script_made_under_its_output():
    made = {"--output": {"given": "out_timm", "folders": 2, "files": 1}}
    trials = [Trial(variant="baseline", trial=t, script_outputs=made) for t in range(3)] + [Trial(error="died")]
    report = SimpleNamespace(variants=[SimpleNamespace(trials=trials)])
    assert outputs_lines(report) == [
        "The script made 6 folders and 3 files under its --output in 3 trials: each trial's in a folder of its own, "
        "removed with it, not in out_timm."
    ]
