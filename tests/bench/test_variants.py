import pytest

from accel.bench.variants import Variant, ablation_variants, describe, interleave, vary_variants
from accel.config.recipe_yaml import parse_value
from accel.errors import AccelError, RecipeError


def test_ablation_names_and_overrides_exactly():
    speedups = {"amp": {"dtype": "bf16"}, "channels_last": {}, "compile": {"enabled": False}, "cudnn": None}
    got = {v.name: v.overrides for v in ablation_variants(speedups)}
    assert list(got) == ["baseline", "all", "+amp", "+channels_last", "+cudnn", "-amp", "-channels_last", "-cudnn"]

    def sw(amp, cl, cudnn):
        return {"speedups.amp.enabled": amp, "speedups.channels_last.enabled": cl, "speedups.cudnn.enabled": cudnn}

    # compile is disabled in the recipe: not under test, absent from every override set.
    assert got["baseline"] == sw(False, False, False)
    assert got["all"] == sw(True, True, True)
    assert got["+amp"] == sw(True, False, False)
    assert got["+cudnn"] == sw(False, False, True)
    assert got["-amp"] == sw(False, True, True)
    assert got["-channels_last"] == sw(True, False, True)


def test_ablation_with_one_speedup_drops_duplicates():
    got = ablation_variants({"amp": {"enabled": True}})
    assert [v.name for v in got] == ["baseline", "+amp"]
    assert got[1].overrides == {"speedups.amp.enabled": True}


def test_ablation_without_enabled_speedups_is_a_recipe_error():
    with pytest.raises(RecipeError, match="at least one enabled speed-up"):
        ablation_variants({"compile": {"enabled": False}})
    with pytest.raises(RecipeError):
        ablation_variants({})


def test_vary_is_a_cartesian_product_first_key_slowest():
    got = vary_variants(["data.batch_size=64,128", "speedups.amp.dtype=bf16,fp16"])
    assert [v.name for v in got] == [
        "data.batch_size=64,speedups.amp.dtype=bf16",
        "data.batch_size=64,speedups.amp.dtype=fp16",
        "data.batch_size=128,speedups.amp.dtype=bf16",
        "data.batch_size=128,speedups.amp.dtype=fp16",
    ]
    assert got[2].overrides == {"data.batch_size": 128, "speedups.amp.dtype": "bf16"}


def test_vary_value_typing():
    (v,) = vary_variants(["optim.lr=1e-3"])
    assert v.overrides == {"optim.lr": 0.001}
    values = [x.overrides["k"] for x in vary_variants(["k=64,2.5,1e-3,true,False,null,bf16,on,'8'"])]
    assert values == [64, 2.5, 0.001, True, False, None, "bf16", "on", "8"]
    assert [type(x) for x in values[:5]] == [int, float, float, bool, bool]
    assert parse_value(" 7 ") == 7


def test_a_scripts_values_are_kept_as_typed():
    # a script parses its own options: YAML's octal, sexagesimal and float spellings must not reach it respelled
    values = [x.overrides["arg:--v"] for x in vary_variants(["arg:--v=010,1:30,1.10,1e-3,8,true,null,'07'"])]
    assert values == ["010", "1:30", "1.10", "1e-3", 8, True, None, "07"]
    (v,) = vary_variants(["arg:--trainer.max_time=00:00:10:00"])  # Lightning's DD:HH:MM:SS, not 600
    assert v.name == "arg:--trainer.max_time=00:00:10:00"


@pytest.mark.parametrize("bad", [["data.batch_size"], ["=1,2"], ["k="], ["k=1", "k=2"], ["k=1,1"], []])
def test_vary_rejects_malformed_items(bad):
    with pytest.raises(AccelError):
        vary_variants(bad)


def test_interleave_runs_a_b_c_a_b_c():
    a, b, c = Variant("A"), Variant("B"), Variant("C")
    order = interleave([a, b, c], 2)
    assert [(t, v.name) for t, v in order] == [(0, "A"), (0, "B"), (0, "C"), (1, "A"), (1, "B"), (1, "C")]
    with pytest.raises(AccelError, match="--trials"):
        interleave([a], 0)


def test_variant_is_hashable_and_listed():
    v = Variant("+amp", {"speedups.amp.enabled": True})
    assert {v: 1}[v] == 1
    text = describe(ablation_variants({"amp": {}, "cudnn": {}}))
    rows = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines()}
    assert list(rows) == ["baseline", "all", "+amp", "+cudnn", "-amp", "-cudnn"]
    assert rows["+amp"] == ["speedups.amp.enabled=true", "speedups.cudnn.enabled=false"]


def test_ablating_a_recipe_without_speedups_says_how_to_add_one_on_the_command_line():
    with pytest.raises(RecipeError, match=r"--set speedups\.amp\.dtype=bf16"):
        ablation_variants({"amp": {"enabled": False}})


@pytest.mark.parametrize(
    "item, example",
    [("arg:--batch", "arg:--batch=16,32"), ("env:SEED=", "env:NAME=1,2"), ("data.batch_size", "data.batch_size=64")],
)
def test_a_vary_without_values_shows_the_shape_of_its_own_kind(item, example):
    with pytest.raises(AccelError, match=f"e.g. --vary {example}"):
        vary_variants([item])
