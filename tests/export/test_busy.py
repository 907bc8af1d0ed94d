"""Export's latency table on a busy machine (issue 39): the load while the latencies were measured is recorded in
export.json, and a busy one is said under the printed table, as bench and profile say it."""

from __future__ import annotations

import json

import pytest

from accel.cli import main
from accel.measure import load

from .conftest import QUICK


def _export(tiny_run, out, capsys) -> tuple[dict, list[str]]:
    argv = ["export", str(tiny_run), "--out", str(out), "--threads", "1"]
    argv += [item for key, value in QUICK.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    assert main(argv) == 0
    return json.loads((out / "export.json").read_text()), capsys.readouterr().out.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("others", [0.9, 0.0])
def test_the_latency_table_says_when_others_took_the_cores(tiny_run, tmp_path, capsys, monkeypatch, others):
    measured = load.between

    def others_took(start, end):  # the machine's real counters, with others' share as this case needs, over a
        return {**measured(start, end), "others_share": others, "wall_s": 10.0}  # window long enough to judge

    monkeypatch.setattr(load, "between", others_took)
    report, printed = _export(tiny_run, tmp_path / "out", capsys)
    assert report["timing"]["load"]["others_share"] == others and report["timing"]["load"]["cores"] >= 1
    note = report["timing"]["busy"]
    if others:
        assert note.startswith("The machine was busy while the latencies were measured: other processes took 90%")
        assert "not to be trusted" in note and f"Note: {note}" in printed
    else:
        assert note is None and not any(line.startswith("Note:") for line in printed)
    assert printed[-1] == str(tmp_path / "out" / "export.json")
