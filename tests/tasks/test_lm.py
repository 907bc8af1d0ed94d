"""Language models: token datasets (a folder of text files, memory-mapped token files), the GPT, the
language_model task from a recipe, and other tasks named in a recipe."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
import torch

from accel.config.recipe import validate_recipe
from accel.data.datasets.text import TextFiles, TokenChunks, TokenFile
from accel.errors import AccelError, DataError, RecipeError
from accel.models import GPT
from accel.tasks import LanguageModel, Regression
from accel.train.run import build_trainer, run_recipe

LM = {
    "name": "lm",
    "seed": 0,
    "task": "language_model",
    "model": {"name": "gpt", "args": {"width": 16, "depth": 1, "heads": 2}},
    "data": {"dataset": {"name": "text_files", "context": 16}, "batch_size": 8},
    "optim": {"name": "adamw", "lr": 3e-3},
    "train": {"max_steps": 6},
    "device": "cpu",
    "log": {"progress": False, "tensorboard": False, "every_steps": 2},
}


def text_folder(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_token_chunks_are_consecutive_windows_with_targets_shifted_by_one():
    chunks = TokenChunks(np.arange(50, dtype=np.uint16), context=8)
    assert len(chunks) == 6  # (50 - 1) // 8: every window has its next token
    inputs, targets = chunks[2]
    assert inputs.tolist() == list(range(16, 24)) and targets.tolist() == list(range(17, 25))
    assert inputs.dtype == targets.dtype == torch.int64
    batch = chunks.__getitems__([5, 0])
    assert batch.inputs[0].tolist() == list(range(40, 48)) and batch.targets[1].tolist() == list(range(1, 9))


def test_text_files_reads_the_sorted_files_as_bytes_and_holds_out_the_tail(tmp_path):
    folder = text_folder(tmp_path, {"b.py": "b" * 60, "a.py": "a" * 40, "notes.txt": "x" * 100})
    splits = TextFiles.build(TextFiles.Config(name="text_files", root=str(folder), context=9, val_fraction=0.1), seed=0)
    assert splits.vocab_size == 256 and splits.sample_shape == (9,)
    train, val = splits.train, splits.val
    assert bytes(train.tokens[:41].tolist()) == b"a" * 40 + b"b"  # a.py first; notes.txt not matched
    assert len(train.tokens) == 90 and bytes(val.tokens.tolist()) == b"b" * 10
    assert splits.model_args() == {"num_classes": 256, "vocab_size": 256, "context": 9}


def test_text_files_says_where_it_looked(tmp_path):
    with pytest.raises(DataError, match=f"no folder at {tmp_path / 'missing'}"):
        TextFiles.build(TextFiles.Config(name="text_files", root=str(tmp_path / "missing")), seed=0)
    with pytest.raises(DataError, match=r"no file in .* matches `\*.md`"):
        TextFiles.build(TextFiles.Config(name="text_files", root=str(tmp_path), glob="*.md"), seed=0)


def test_the_default_corpus_is_this_pythons_standard_library():
    splits = TextFiles.build(TextFiles.Config(name="text_files"), seed=0)
    total = len(splits.train.tokens) + len(splits.val.tokens)
    assert total > 1_000_000 and len(splits.val.tokens) == int(total * 0.1)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_token_files_are_memory_mapped_with_the_vocabulary_read_from_them(tmp_path, dtype):
    ids = np.random.default_rng(0).integers(0, 70_000 if dtype == "uint32" else 5000, 1000).astype(dtype)
    ids.tofile(tmp_path / "train.bin")
    ids[:200].tofile(tmp_path / "val.bin")
    cfg = TokenFile.Config(
        name="token_file", path=str(tmp_path / "train.bin"), val_path=str(tmp_path / "val.bin"), dtype=dtype, context=10
    )
    splits = TokenFile.build(cfg, seed=0)
    assert isinstance(splits.train.tokens, np.memmap) and splits.vocab_size == int(ids.max()) + 1
    assert splits.train[3][0].tolist() == ids[30:40].tolist() and len(splits.val) == 19


def test_a_token_file_of_the_wrong_size_or_vocabulary_is_refused(tmp_path):
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(DataError, match="not a whole number of uint16 ids"):
        TokenFile.build(TokenFile.Config(name="token_file", path=str(tmp_path / "odd.bin")), seed=0)
    np.array([1, 2, 300] * 20, dtype=np.uint16).tofile(tmp_path / "ids.bin")
    with pytest.raises(DataError, match="token id 300 is outside vocab_size 256"):
        TokenFile.build(
            TokenFile.Config(name="token_file", path=str(tmp_path / "ids.bin"), vocab_size=256, context=4), seed=0
        )
    with pytest.raises(DataError, match="no file at"):
        TokenFile.build(TokenFile.Config(name="token_file", path=str(tmp_path / "none.bin")), seed=0)


def test_the_gpt_is_causal_and_its_output_layer_shares_the_embedding():
    torch.manual_seed(0)
    model = GPT(vocab_size=11, context=8, width=16, depth=2, heads=2).eval()
    a = torch.randint(0, 11, (2, 8))
    b = a.clone()
    b[:, 5:] = (b[:, 5:] + 1) % 11  # change the future only
    with torch.no_grad():
        assert torch.allclose(model(a)[:, :5], model(b)[:, :5], atol=1e-6)
        assert not torch.allclose(model(a)[:, 5:], model(b)[:, 5:])
    assert model.head.weight is model.embed.weight
    with pytest.raises(ValueError, match="longer than the model's context 8"):
        model(torch.zeros(1, 9, dtype=torch.int64))


def test_the_language_model_task_scores_every_next_token():
    torch.manual_seed(0)
    model, task = GPT(11, 6, 8, 1, 2), LanguageModel()
    inputs, targets = torch.randint(0, 11, (3, 6)), torch.randint(0, 11, (3, 6))
    loss = task.loss(model, (inputs, targets))
    sums = task.eval_sums(model, (inputs, targets))
    metrics = task.metrics({**{k: v.item() for k, v in sums.items()}, "count": 3})
    assert metrics["val_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert metrics["val_perplexity"] == pytest.approx(math.exp(loss.item()), rel=1e-5)
    assert metrics["val_bits_per_token"] == pytest.approx(loss.item() / math.log(2), rel=1e-5)
    assert task.samples((inputs, targets)) == 3 and task.tokens((inputs, targets)) == 18


def test_a_language_model_trains_from_a_recipe_and_reports_its_metrics(tmp_path):
    recipe = validate_recipe(
        {
            **LM,
            "data": {
                **LM["data"],
                "dataset": {
                    "name": "text_files",
                    "root": str(text_folder(tmp_path, {"a.py": "def f(x):\n    return x\n" * 40})),
                    "context": 16,
                },
            },
        }
    )
    summary = run_recipe(recipe, out=tmp_path / "run")
    metrics = summary["metrics"]
    assert summary["status"] == "completed" and summary["tokens_per_s"] > 0
    assert {"val_loss", "val_perplexity", "val_bits_per_token", "val_accuracy", "train_loss"} <= set(metrics)
    assert metrics["val_loss"] < math.log(256)  # learnt something about the bytes in 6 steps


def test_regression_and_a_users_own_task_are_named_in_a_recipe(tmp_path, monkeypatch, tiny):
    (tmp_path / "my_tasks.py").write_text(
        textwrap.dedent("""
        import torch.nn.functional as F
        from accel.tasks import Classification

        class Smoothed(Classification):
            def __init__(self, smoothing):
                super().__init__(lambda out, y: F.cross_entropy(out, y, label_smoothing=smoothing))

        def plain(model, batch):
            inputs, targets = batch
            return F.cross_entropy(model(inputs.float()), targets)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = build_trainer(validate_recipe({**tiny, "task": {"name": "my_tasks:Smoothed", "args": {"smoothing": 0.1}}}))
    assert type(task.task).__name__ == "Smoothed"
    assert type(build_trainer(validate_recipe({**tiny, "task": "my_tasks:plain"})).task).__name__ == "FunctionTask"
    assert isinstance(build_trainer(validate_recipe({**tiny, "task": "regression"})).task, Regression)
    with pytest.raises(AccelError, match="Cannot import `my_tasks:missing`"):
        build_trainer(validate_recipe({**tiny, "task": "my_tasks:missing"}))


def test_an_unknown_task_lists_the_valid_ones(tiny):
    with pytest.raises(
        RecipeError,
        match=r"Unknown task `langauge_model` \(did you mean `language_model`\?\)\. "
        r"Valid tasks: classification, language_model, model_loss, package.module:attribute, "
        r"regression",
    ):
        validate_recipe({**tiny, "task": "langauge_model"})


def test_mixup_with_another_task_is_refused_before_training(tiny):
    tiny["data"]["augment"] = {"ops": ["hflip", {"mixup": {"alpha": 0.2}}]}
    with pytest.raises(
        AccelError, match="mixup mix class labels, so they need `task: classification`, not `regression`"
    ):
        build_trainer(validate_recipe({**tiny, "task": "regression"}))


def test_image_augmentation_on_token_data_is_refused(tmp_path):
    recipe = {**LM, "data": {**LM["data"], "augment": {"ops": ["hflip"]}}}
    with pytest.raises(DataError, match="serves token ids"):
        build_trainer(validate_recipe(recipe))
