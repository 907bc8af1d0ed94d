"""The fused language-model loss (task.fused_loss): the output layer and the cross-entropy in chunks of tokens,
never holding the logits. Same loss and gradients as F.cross_entropy on the full logits, through the recipe path,
under compile and autocast; and the full logits are really never kept for backward."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch._dynamo.utils import counters

from accel.callbacks import Callback
from accel.config.recipe import validate_recipe
from accel.errors import AccelError
from accel.measure.flops import count_step_flops
from accel.models import GPT
from accel.runs.records import StepRecord, read_summary
from accel.tasks import LanguageModel
from accel.tasks.chunked_ce import chunked_eval_sums, chunked_linear_cross_entropy
from accel.train.run import build_trainer
from conftest import cuda_only, finish
from tests.strategy.test_distributed import TOLERANCE, _train

TOL = {"rtol": 1e-5, "atol": 1e-5}


def operands(tokens=14, width=8, vocab=37, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, width, generator=g, requires_grad=True)
    weight = torch.randn(vocab, width, generator=g, requires_grad=True)
    b = torch.randn(vocab, generator=g, requires_grad=True) if bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=g)
    targets[[1, 6, 13]] = -100  # padding: not scored
    return hidden, weight, b, targets


def loss_and_grads(loss_fn, hidden, weight, bias, targets):
    inputs = [t for t in (hidden, weight, bias) if t is not None]
    loss = loss_fn(hidden, weight, bias, targets)
    return (loss, *torch.autograd.grad(loss, inputs))


@pytest.mark.parametrize("chunk_tokens", [5, 14, 64])  # 5 does not divide the 14 tokens; 64 is one chunk
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
def test_the_chunked_loss_and_gradients_are_those_of_the_full_logits(chunk_tokens, smoothing, bias):
    args = operands(bias=bias)

    def plain(hidden, weight, b, targets):
        return F.cross_entropy(F.linear(hidden, weight, b), targets, ignore_index=-100, label_smoothing=smoothing)

    def chunked(hidden, weight, b, targets):
        return chunked_linear_cross_entropy(hidden, weight, b, targets, -100, smoothing, chunk_tokens)

    for want, got in zip(loss_and_grads(plain, *args), loss_and_grads(chunked, *args), strict=True):
        torch.testing.assert_close(got, want, **TOL)


def test_the_full_logits_are_never_saved_for_backward():
    hidden, weight, bias, targets = operands(tokens=64, vocab=500)
    full = hidden.shape[0] * weight.shape[0]

    def largest_saved(loss_fn) -> int:
        sizes = []

        def pack(tensor):
            sizes.append(tensor.numel())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss_fn()
        return max(sizes)

    assert largest_saved(lambda: F.cross_entropy(F.linear(hidden, weight, bias), targets)) >= full  # what it catches
    assert largest_saved(lambda: chunked_linear_cross_entropy(hidden, weight, bias, targets, chunk_tokens=16)) < full


def test_evaluation_sums_in_chunks_match_the_full_logits():
    hidden, weight, bias, targets = (t.detach() if t.is_floating_point() else t for t in operands())
    logits = F.linear(hidden, weight, bias)
    loss, correct = chunked_eval_sums(hidden, weight, bias, targets, chunk_tokens=5)
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets, reduction="sum"), **TOL)
    assert correct.item() == ((logits.argmax(-1) == targets) & (targets != -100)).sum().item()


def tiny_gpt(seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(vocab_size=50, context=8, width=16, depth=1, heads=2)


def token_batch(batch=3, length=7, vocab=50):
    g = torch.Generator().manual_seed(1)
    inputs, targets = torch.randint(0, vocab, (2, batch, length), generator=g)
    targets[0, :2] = -100
    return inputs, targets


def test_the_tied_embedding_gets_the_same_gradient_as_with_the_full_logits():
    batch = token_batch()
    results = []
    for fused in (False, True):
        task = LanguageModel(label_smoothing=0.1, fused_loss=fused, chunk_tokens=4)
        model = tiny_gpt()
        loss = task.loss(model, batch)
        loss.backward()
        assert model.head.weight is model.embed.weight
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    (want_loss, want), (got_loss, got) = results
    torch.testing.assert_close(got_loss, want_loss, **TOL)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], **TOL, msg=name)


def test_fused_evaluation_reports_the_same_metrics():
    batch, model = token_batch(), tiny_gpt()
    with torch.no_grad():
        plain = LanguageModel().eval_sums(model, batch)
        fused = LanguageModel(fused_loss=True, chunk_tokens=4).eval_sums(model, batch)
    assert fused.keys() == plain.keys()
    for key in plain:
        torch.testing.assert_close(fused[key].double(), plain[key].double(), **TOL, msg=key)


def test_under_bf16_autocast_the_logsumexp_is_float32_and_close_to_the_plain_loss():
    batch, model = token_batch(), tiny_gpt()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = LanguageModel().loss(model, batch)
        fused = LanguageModel(fused_loss=True, chunk_tokens=4).loss(model, batch)
    assert fused.dtype == torch.float32
    fused.backward()
    assert model.embed.weight.grad.dtype == torch.float32
    torch.testing.assert_close(fused, plain.float(), rtol=1e-2, atol=1e-2)


def test_the_log_says_which_fused_loss_ran(caplog):
    with caplog.at_level("INFO", logger="accel"):
        LanguageModel(fused_loss=True, chunk_tokens=4).loss(tiny_gpt(), token_batch())
    assert "fused loss: the chunked PyTorch cross-entropy, 4 tokens a chunk" in caplog.text


class LogitsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = nn.Embedding(50, 8), nn.Linear(8, 50)

    def forward(self, x):
        return self.out(self.embed(x))


class HeadWithoutHidden(LogitsOnly):
    def get_output_embeddings(self):
        return self.out


def test_a_model_that_returns_only_logits_is_refused_with_what_it_lacks():
    task = LanguageModel(fused_loss=True)
    with pytest.raises(AccelError, match=r"LogitsOnly has no `get_output_embeddings\(\)`.*fused_loss: false"):
        task.loss(LogitsOnly(), token_batch())
    with pytest.raises(AccelError, match="HeadWithoutHidden.forward takes no `return_hidden` argument"):
        task.loss(HeadWithoutHidden(), token_batch())


class Recorder(Callback):
    def __init__(self):
        self.losses = []

    def on_log(self, trainer, record):
        if isinstance(record, StepRecord):
            self.losses.append(record.loss)


def recipe_losses(tmp_path, task: dict, **changes) -> list[float]:
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n" * 80)
    recipe = {
        "name": "lm",
        "seed": 0,
        "task": task,
        "loss": {"name": "cross_entropy", "label_smoothing": 0.1},
        "model": {"name": "gpt", "args": {"width": 16, "depth": 1, "heads": 2}},
        "data": {"dataset": {"name": "text_files", "root": str(tmp_path), "context": 16}, "batch_size": 6},
        "optim": {"name": "adamw", "lr": 3e-3},
        "train": {"max_steps": 4},
        "device": "cpu",
        "log": {"progress": False, "tensorboard": False, "every_steps": 1},
        **changes,
    }
    recorder = Recorder()
    trainer = build_trainer(validate_recipe(recipe), extra_callbacks=[recorder])
    trainer.fit()
    assert len(recorder.losses) == 4
    return recorder.losses


@pytest.mark.slow
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_recipe_trains_to_the_same_losses_with_the_fused_loss(tmp_path, grad_accum):
    changes = {"train": {"max_steps": 4, "grad_accum": grad_accum}}
    plain = recipe_losses(tmp_path, {"name": "language_model"}, **changes)
    fused = recipe_losses(tmp_path, {"name": "language_model", "fused_loss": True, "chunk_tokens": 40}, **changes)
    assert fused == pytest.approx(plain, rel=1e-5, abs=1e-5)


@pytest.mark.slow
def test_whole_step_compile_traces_the_fused_loss_without_a_graph_break(tmp_path):
    fused = {"name": "language_model", "fused_loss": True, "chunk_tokens": 40}
    eager = recipe_losses(tmp_path, fused)
    breaks = sum(counters["graph_break"].values())
    compiled = recipe_losses(
        tmp_path, fused, speedups={"compile": {"backend": "aot_eager", "whole_step": True, "fullgraph": True}}
    )
    assert sum(counters["graph_break"].values()) == breaks
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-5)


def test_a_hugging_face_causal_lm_hands_over_its_hidden_states():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=50, n_positions=8, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0
    )
    model = transformers.GPT2LMHeadModel(config)
    batch = token_batch()
    losses = [LanguageModel(fused_loss=fused, chunk_tokens=4).loss(model, batch) for fused in (False, True)]
    grads = [torch.autograd.grad(loss, model.transformer.wte.weight)[0] for loss in losses]
    torch.testing.assert_close(losses[1], losses[0], **TOL)
    torch.testing.assert_close(grads[1], grads[0], **TOL)
    model.config.logit_scale = 0.5
    with pytest.raises(AccelError, match=r"config.logit_scale = 0.5"):
        LanguageModel(fused_loss=True).loss(model, batch)


@cuda_only
def test_on_cuda_the_fused_loss_matches_the_plain_loss(caplog):
    batch = tuple(t.cuda() for t in token_batch())
    model = tiny_gpt().cuda()
    with caplog.at_level("INFO", logger="accel"):
        fused = LanguageModel(label_smoothing=0.1, fused_loss=True).loss(model, batch)
    plain = LanguageModel(label_smoothing=0.1).loss(model, batch)
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)
    assert "fused loss: " in caplog.text  # which kernel ran: liger-kernel's where installed


def test_the_flop_count_is_the_models_not_the_recomputation():
    batch, model = token_batch(), tiny_gpt()
    plain, fused = (
        count_step_flops(model, LanguageModel(fused_loss=fused), batch, nullcontext()) for fused in (False, True)
    )
    assert fused == plain > 0


@pytest.mark.slow
def test_two_ddp_processes_with_the_fused_loss_train_as_one_with_the_plain_loss(tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n" * 80)
    recipe = {
        "name": "lm",
        "seed": 0,
        "task": {"name": "language_model"},
        "device": "cpu",
        "model": {"name": "gpt", "args": {"width": 16, "depth": 1, "heads": 2}},
        "data": {"dataset": {"name": "text_files", "root": str(tmp_path), "context": 16}, "batch_size": 8},
        "optim": {"name": "adamw", "lr": 3e-3},
        "train": {"max_steps": 8},
        "log": {"progress": False, "tensorboard": False, "every_steps": 4},
    }
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(recipe))
    two = _train(path, tmp_path / "two", "--nproc", "2", "--set", "task.fused_loss=true")
    one = _train(path, tmp_path / "one", "--set", "data.batch_size=16")
    _, err = finish(two)
    assert two.returncode == 0, err
    _, err = finish(one)
    assert one.returncode == 0, err
    a, b = (read_summary(tmp_path / run / "summary.json").metrics for run in ("two", "one"))
    for key in ("train_loss", "val_loss", "val_accuracy"):
        assert a[key] == pytest.approx(b[key], rel=TOLERANCE, abs=TOLERANCE), key
