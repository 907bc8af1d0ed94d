"""Hugging Face interop (the `hf` extra): a transformers causal LM, built from a config with nothing downloaded,
trains from a recipe (dict batches, the model's own loss) and from Python."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from accel import Trainer
from accel.config.recipe import validate_recipe
from accel.config.train_config import TrainConfig
from accel.errors import AccelError
from accel.models import ModelConfig, build_model
from accel.models.hf import hf_causal_lm
from accel.tasks import ModelLoss
from accel.train.run import run_recipe

transformers = pytest.importorskip("transformers", reason="the `hf` extra (transformers) is not installed")

TINY_GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_layer": 1, "n_head": 2}


@pytest.mark.slow
def test_a_transformers_model_trains_from_a_recipe_on_dict_batches(tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n" * 30)
    recipe = validate_recipe(
        {
            "name": "hf",
            "seed": 0,
            "task": "model_loss",
            "device": "cpu",
            "model": {"name": "hf_causal_lm", "args": TINY_GPT2},
            "data": {
                "dataset": {"name": "text_files", "root": str(tmp_path), "context": 16, "layout": "hf"},
                "batch_size": 8,
            },
            "optim": {"name": "adamw", "lr": 3e-3},
            "train": {"max_steps": 6},
            "log": {"progress": False, "tensorboard": False, "every_steps": 2},
        }
    )
    summary = run_recipe(recipe, out=tmp_path / "run")
    assert summary["status"] == "completed" and summary["tokens_per_s"] > 0
    assert math.isfinite(summary["metrics"]["val_loss"]) and summary["metrics"]["val_loss"] < math.log(256)


def test_a_transformers_model_trains_from_python_with_dict_batches():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(vocab_size=32, n_positions=8, bos_token_id=None, eos_token_id=None, **TINY_GPT2)
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.randint(0, 32, (24, 8))
    batches = [
        {"input_ids": ids[i : i + 8], "attention_mask": torch.ones(8, 8, dtype=torch.int64), "labels": ids[i : i + 8]}
        for i in range(0, 24, 8)
    ]
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        batches,
        val_loader=batches,
        task=ModelLoss(),
        device="cpu",
        config=TrainConfig(epochs=2),
    )
    summary = trainer.fit()
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])
    assert summary["tokens_per_s"] > 0


def test_the_attention_speedup_switches_a_transformers_model_to_sdpa_and_back():
    from transformers import AutoConfig, AutoModelForCausalLM

    from accel.speedups.attention import Attention

    config = AutoConfig.for_model(vocab_size=32, n_positions=8, bos_token_id=None, eos_token_id=None, **TINY_GPT2)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(module.config._attn_implementation))
    ids = torch.randint(0, 32, (4, 8))
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        [{"input_ids": ids, "labels": ids}],
        task=ModelLoss(),
        speedups=[Attention(Attention.Config(backend="math"))],
        device="cpu",
    )
    trainer.fit()
    assert seen and set(seen) == {"sdpa"} and model.config._attn_implementation == "eager"


TINY_BERT = {
    "model_type": "bert",
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 16,
}


def _classifier(num_classes: int, **args) -> torch.nn.Module:
    return build_model(ModelConfig(name="hf_sequence_classifier", args=args), num_classes=num_classes).eval()


def _labelled_batches(count: int = 3, classes: int = 3) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {
            "input_ids": torch.randint(1, 64, (8, 12), generator=g),
            "attention_mask": torch.ones(8, 12, dtype=torch.int64),
            "labels": torch.randint(0, classes, (8,), generator=g),
        }
        for _ in range(count)
    ]


def test_a_causal_lm_saved_locally_loads_back_with_identical_outputs(tmp_path):
    saved = hf_causal_lm(vocab_size=32, context=8, **TINY_GPT2).eval()
    saved.save_pretrained(tmp_path / "gpt")
    assert (tmp_path / "gpt" / "model.safetensors").is_file()
    loaded = build_model(
        ModelConfig(name="hf_causal_lm", args={"pretrained": str(tmp_path / "gpt")}),
        num_classes=32,
        vocab_size=32,
        context=8,
    ).eval()
    ids = torch.randint(0, 32, (2, 8))
    assert torch.equal(loaded(ids).logits, saved(ids).logits)
    saved.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")  # transformers would keep bf16; accel wants fp32
    assert hf_causal_lm(vocab_size=32, context=8, pretrained=str(tmp_path / "bf16")).dtype == torch.float32


def test_a_pretrained_causal_lm_must_cover_the_datas_vocabulary_and_context(tmp_path):
    hf_causal_lm(vocab_size=32, context=8, **TINY_GPT2).save_pretrained(tmp_path / "gpt")
    with pytest.raises(AccelError, match="token ids up to 255, but the model in .* has a vocabulary of 32"):
        hf_causal_lm(vocab_size=256, context=8, pretrained=str(tmp_path / "gpt"))
    with pytest.raises(AccelError, match="context is 16 tokens, but the model in .* takes at most 8"):
        hf_causal_lm(vocab_size=32, context=16, pretrained=str(tmp_path / "gpt"))


def test_a_missing_pretrained_directory_is_named(tmp_path):
    with pytest.raises(AccelError, match=f"pretrained directory {tmp_path / 'nope'} does not exist"):
        hf_causal_lm(vocab_size=32, context=8, pretrained=str(tmp_path / "nope"))
    with pytest.raises(AccelError, match=f"pretrained directory {tmp_path} has no config.json"):
        _classifier(3, pretrained=str(tmp_path))


def test_a_pretrained_causal_lm_fine_tunes_from_a_recipe(tmp_path):
    hf_causal_lm(vocab_size=256, context=16, **TINY_GPT2).save_pretrained(tmp_path / "gpt")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.py").write_text("def f(x):\n    return x + 1\n" * 30)
    recipe = validate_recipe(
        {
            "name": "hf",
            "seed": 0,
            "task": "model_loss",
            "device": "cpu",
            "model": {"name": "hf_causal_lm", "args": {"pretrained": str(tmp_path / "gpt")}},
            "data": {
                "dataset": {"name": "text_files", "root": str(tmp_path / "text"), "context": 16, "layout": "hf"},
                "batch_size": 8,
            },
            "optim": {"name": "adamw", "lr": 3e-3},
            "train": {"max_steps": 2},
            "log": {"progress": False, "tensorboard": False, "every_steps": 2},
        }
    )
    summary = run_recipe(recipe, out=tmp_path / "run")
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])


def test_a_sequence_classifier_saved_locally_loads_back_with_identical_outputs(tmp_path):
    saved = _classifier(3, **TINY_BERT)
    saved.save_pretrained(tmp_path / "bert")
    loaded = _classifier(3, pretrained=str(tmp_path / "bert"))
    batch = _labelled_batches(1)[0]
    assert torch.equal(loaded(**batch).logits, saved(**batch).logits)


def test_a_sequence_classifier_of_another_class_count_gets_a_new_head(tmp_path, caplog):
    saved = _classifier(3, **TINY_BERT)
    saved.save_pretrained(tmp_path / "bert")
    with caplog.at_level(logging.INFO, logger="accel"):
        loaded = _classifier(5, pretrained=str(tmp_path / "bert"))
    assert "head re-initialised: 3 -> 5 classes" in caplog.text and loaded.config.num_labels == 5
    same = saved.bert.embeddings.word_embeddings.weight
    assert torch.equal(loaded.bert.embeddings.word_embeddings.weight, same)
    assert loaded(**_labelled_batches(1, classes=5)[0]).logits.shape == (8, 5)


def test_a_pretrained_sequence_classifier_trains_on_dict_batches_with_its_own_loss(tmp_path):
    _classifier(3, **TINY_BERT).save_pretrained(tmp_path / "bert")
    model = _classifier(3, pretrained=str(tmp_path / "bert")).train()
    batches = _labelled_batches()
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        batches,
        val_loader=batches,
        task=ModelLoss(),
        device="cpu",
        config=TrainConfig(epochs=2),
    )
    summary = trainer.fit()
    assert summary["status"] == "completed" and math.isfinite(summary["metrics"]["val_loss"])
