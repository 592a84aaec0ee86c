"""Packed training batches: the rows, and that every learned position computes (and the
distillation loss and its gradients come out) as with each sequence alone in its row."""

from __future__ import annotations

import pytest
import torch

from kvspec.models.distil import DistilSpec, distil_loss
from kvspec.models.packing import make_batch, rows_of

from ..tiny import sliding_gemma3, tiny_llama


class Seq:
    def __init__(self, ids: list[int], start: int) -> None:
        self.ids, self.start = tuple(ids), start


def _seqs(lengths: list[int], vocab: int = 64, seed: int = 0) -> list[Seq]:
    g = torch.Generator().manual_seed(seed)
    return [Seq(torch.randint(1, vocab, (n,), generator=g).tolist(), n // 3) for n in lengths]


def test_rows_are_first_fit_decreasing_within_the_longest_sequence() -> None:
    lengths = [5, 20, 7, 13, 8, 6]
    rows = rows_of(lengths)
    assert rows == [[1], [3, 2], [4, 5, 0]]  # 20 | 13 + 7 | 8 + 6 + 5 (width 20)
    assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
    assert rows_of([4, 4, 4]) == [[0], [1], [2]]


def test_labels_and_index_follow_the_sequences_in_order() -> None:
    seqs = _seqs([5, 20, 7, 13, 8, 6])
    batch = make_batch(seqs, pad_id=0)
    assert batch.ids.shape == (3, 20)
    want = [t for s in seqs for t in s.ids[s.start + 1 :]]
    assert batch.labels.tolist() == want
    got = batch.ids.flatten()[batch.index].tolist()
    assert got == [t for s in seqs for t in s.ids[s.start : -1]]
    alone = make_batch(_seqs([4, 4, 4]))
    assert alone.segments is None  # one per row: plain causal attention, no mask


def _alone(model: torch.nn.Module, seqs: list[Seq]) -> torch.Tensor:
    """Hidden states at the learned positions, each sequence run alone."""
    out = []
    for s in seqs:
        hidden = model.model(input_ids=torch.tensor([s.ids])).last_hidden_state[0]
        out.append(hidden[s.start : len(s.ids) - 1])
    return torch.cat(out)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_hidden_states_equal_each_sequence_alone(attn: str) -> None:
    """float64 weights; eager attention takes its softmax in float32 (HF), so it agrees to
    float32 rounding only."""
    tol = 1e-9 if attn == "sdpa" else 1e-5
    model = tiny_llama(0, attn_implementation=attn)
    seqs = _seqs([5, 20, 7, 13, 8, 6])
    batch = make_batch(seqs)
    with torch.no_grad():
        packed = batch.learned(model.model(**batch.inputs(model)).last_hidden_state)
        want = _alone(model, seqs)
    torch.testing.assert_close(packed, want, rtol=tol, atol=tol)


def test_packed_rows_keep_a_sliding_window() -> None:
    """Gemma-3 with a 4-token window on one of two layers: each sequence's slots lose the keys
    the window drops at its own positions, not at the row's."""
    model = sliding_gemma3(0).double()
    seqs = _seqs([5, 20, 7, 13, 8, 6])
    batch = make_batch(seqs)
    with torch.no_grad():
        packed = batch.learned(model.model(**batch.inputs(model)).last_hidden_state)
        want = _alone(model, seqs)
    torch.testing.assert_close(packed, want, rtol=1e-9, atol=1e-9)


def test_distil_loss_and_gradients_equal_one_sequence_per_row() -> None:
    """Summed over positions (each batch's loss is a mean), to float32 rounding."""
    spec = DistilSpec.from_config(
        {"steps": 1, "batch_size": 6, "lr": 1e-3, "warmup_steps": 0, "beta": 0.0}, seed=0
    )
    seqs = _seqs([5, 20, 7, 13, 8, 6])

    def grads(batches):
        model = tiny_llama(1)
        model.train()
        total = sum(distil_loss(model, b, None, spec)[0] * len(b.labels) for b in batches)
        total.backward()
        return float(total), [p.grad.clone() for p in model.parameters()]

    packed, g_packed = grads([make_batch(seqs)])
    single, g_single = grads([make_batch([s]) for s in seqs])  # each alone in a batch
    assert packed == pytest.approx(single, rel=1e-6)  # the loss takes float32 log-softmaxes
    for a, b in zip(g_packed, g_single, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
