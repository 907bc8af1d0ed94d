"""The measuring pieces: sizes, accuracy and agreement, latency statistics and the order runners take turns."""

from __future__ import annotations

import pytest
import torch

from accel.export import measure
from accel.export.measure import Evaluation, evaluate, file_size, latency, state_dict_size, summarize, tile


def test_summary_is_the_median_with_nearest_rank_spread():
    stats = summarize([4.0, 1.0, 3.0, 2.0, 100.0], batch=10)
    assert stats["median_ms"] == 3.0 and stats["p10_ms"] == 1.0 and stats["p90_ms"] == 100.0
    assert stats["runs"] == 5 and stats["samples_per_s"] == pytest.approx(10 / 0.003)
    assert summarize([1.0, 2.0], batch=1)["median_ms"] == 1.5


def test_runners_take_turns_in_blocks_after_their_warmup(monkeypatch):
    monkeypatch.setattr(measure, "SETTLE_S", 0.0)
    calls: list[str] = []
    runners = {name: (lambda images, name=name: calls.append(name)) for name in "AB"}
    result = latency(runners, {"batch_1": torch.zeros(1), "batch_4": torch.zeros(4)}, runs=7, warmup=2, rounds=3)
    per_input = calls[: len(calls) // 2]
    # warm-up of each, then 3 blocks: one untimed call plus 3, 2, 2 timed calls, A before B in each block
    expected = "AABB" + "A" * 4 + "B" * 4 + ("A" * 3 + "B" * 3) * 2
    assert "".join(per_input) == expected and calls[len(calls) // 2 :] == per_input
    assert result["A"]["batch_1"]["runs"] == 7 and result["B"]["batch_4"]["samples_per_s"] > 0


def test_evaluation_counts_top1_and_the_largest_logit_difference():
    batches = [
        (torch.tensor([[0.0, 1.0], [2.0, 0.0]]), torch.tensor([1, 1])),
        (torch.tensor([[0.0, 3.0]]), torch.tensor([1])),
    ]
    evaluation = evaluate(lambda logits: logits, batches)
    assert evaluation.accuracy == pytest.approx(2 / 3)
    shifted = Evaluation(evaluation.logits + torch.tensor([[0.0, 0.5], [0.0, 0.0], [-0.25, 0.0]]), 0.0)
    assert evaluation.max_abs_diff(shifted) == 0.5


def test_sizes_count_bytes_and_show_what_zeros_save_when_compressed(tmp_path):
    dense, sparse = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)
    with torch.no_grad():
        sparse.weight[:, :48] = 0
    assert state_dict_size(sparse)["size_bytes"] == state_dict_size(dense)["size_bytes"]
    assert state_dict_size(sparse)["gzip_bytes"] < 0.6 * state_dict_size(dense)["gzip_bytes"]
    (tmp_path / "f").write_bytes(b"\0" * 1000)
    assert file_size(tmp_path / "f")["size_bytes"] == 1000 and file_size(tmp_path / "f")["gzip_bytes"] < 100


def test_tile_gives_exactly_the_batch_size_from_real_images():
    images = torch.arange(3).view(3, 1, 1, 1)
    assert tile(images, 7).flatten().tolist() == [0, 1, 2, 0, 1, 2, 0] and tile(images, 1).shape == (1, 1, 1, 1)


def test_thread_count_is_restored():
    before = torch.get_num_threads()
    with measure.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
