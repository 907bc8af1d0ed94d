"""Hugging Face interop (the `hf` extra): a transformers causal LM, built from a config with nothing downloaded,
trains from a recipe (dict batches, the model's own loss) and from Python."""
from __future__ import annotations

import math

import pytest
import torch

from accel import Trainer
from accel.recipe import validate_recipe
from accel.run import run_recipe
from accel.tasks import ModelLoss
from accel.train_config import TrainConfig

transformers = pytest.importorskip("transformers", reason="the `hf` extra (transformers) is not installed")

TINY_GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_layer": 1, "n_head": 2}


def test_a_transformers_model_trains_from_a_recipe_on_dict_batches(tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n" * 30)
    recipe = validate_recipe({
        "name": "hf", "seed": 0, "task": "model_loss", "device": "cpu",
        "model": {"name": "hf_causal_lm", "args": TINY_GPT2},
        "data": {"dataset": {"name": "text_files", "root": str(tmp_path), "context": 16, "layout": "hf"},
                 "batch_size": 8},
        "optim": {"name": "adamw", "lr": 3e-3}, "train": {"max_steps": 6},
        "log": {"progress": False, "tensorboard": False, "every_steps": 2},
    })
    summary = run_recipe(recipe, out=tmp_path / "run")
    assert summary["status"] == "completed" and summary["tokens_per_s"] > 0
    assert math.isfinite(summary["metrics"]["val_loss"]) and summary["metrics"]["val_loss"] < math.log(256)


def test_a_transformers_model_trains_from_python_with_dict_batches():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(vocab_size=32, n_positions=8, bos_token_id=None, eos_token_id=None, **TINY_GPT2)
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.randint(0, 32, (24, 8))
    batches = [{"input_ids": ids[i:i + 8], "attention_mask": torch.ones(8, 8, dtype=torch.int64),
                "labels": ids[i:i + 8]} for i in range(0, 24, 8)]
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), batches, val_loader=batches,
                      task=ModelLoss(), device="cpu", config=TrainConfig(epochs=2))
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
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), [{"input_ids": ids, "labels": ids}],
                      task=ModelLoss(), speedups=[Attention(Attention.Config(backend="math"))], device="cpu")
    trainer.fit()
    assert seen and set(seen) == {"sdpa"} and model.config._attn_implementation == "eager"
