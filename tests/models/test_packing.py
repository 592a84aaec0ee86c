"""Packed training batches: the rows, and that every learned position computes (and the
distillation loss and its gradients come out) as with each sequence alone in its row."""

from __future__ import annotations

import pytest
import torch

from kvspec.models.distil import DistilSpec, distil_loss
from kvspec.models.packing import make_batch, rows_of, shared_length

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


def _check_alone(model: torch.nn.Module, seqs: list[Seq], tol: float = 1e-9):
    """The batch of `seqs`, after checking its hidden states at the learned positions
    against each sequence's alone."""
    batch = make_batch(seqs)
    with torch.no_grad():
        got = batch.learned(batch.hidden(model))
        want = _alone(model, seqs)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    return batch


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_hidden_states_equal_each_sequence_alone(attn: str) -> None:
    """float64 weights; eager attention takes its softmax in float32 (HF), so it agrees to
    float32 rounding only."""
    model = tiny_llama(0, attn_implementation=attn)
    _check_alone(model, _seqs([5, 20, 7, 13, 8, 6]), 1e-9 if attn == "sdpa" else 1e-5)


@pytest.mark.parametrize("prefix", [0, 10])
def test_packed_rows_keep_a_sliding_window(prefix: int) -> None:
    """Gemma-3 with a 4-token window on one of two layers: each sequence's slots lose the keys
    the window drops at its own positions, not at the row's (with a 10-token shared prefix,
    prefix keys among them)."""
    lengths = [5, 20, 7, 13, 8, 6]
    seqs = _prefixed(lengths, prefix) if prefix else _seqs(lengths)
    batch = _check_alone(sliding_gemma3(0).double(), seqs)
    assert (batch.prefix is not None) == bool(prefix)


def _summed_grads(batches: list) -> tuple[float, list[torch.Tensor]]:
    """The distillation loss summed over positions of `batches` (each batch's loss is a
    mean) and its gradients, on a fresh tiny student."""
    spec = DistilSpec.from_config(
        {"steps": 1, "batch_size": 6, "lr": 1e-3, "warmup_steps": 0, "beta": 0.0}, seed=0
    )
    model = tiny_llama(1)
    model.train()
    total = sum(distil_loss(model, b, None, spec)[0] * len(b.labels) for b in batches)
    total.backward()
    return float(total), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("layout", ["packed", "shared prefix"])
def test_distil_loss_and_gradients_equal_each_sequence_on_its_own(layout: str) -> None:
    """To float32 rounding: packed rows against each sequence alone in a batch; a shared
    prefix (its keys and values computed once, gradients from every row adding up in it)
    against the same batch with the prefix in every row."""
    if layout == "packed":
        seqs = _seqs([5, 20, 7, 13, 8, 6])
        batches = [make_batch(seqs)], [make_batch([s]) for s in seqs]
    else:
        seqs = _prefixed([5, 20, 7, 13, 8, 6])
        batches = [make_batch(seqs)], [make_batch(seqs, share=False)]
    assert (batches[0][0].prefix is not None) == (layout == "shared prefix")
    got, g_got = _summed_grads(batches[0])
    want, g_want = _summed_grads(batches[1])
    assert got == pytest.approx(want, rel=1e-6)  # the loss takes float32 log-softmaxes
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def _prefixed(lengths: list[int], prefix: int = 10, seed: int = 2) -> list[Seq]:
    """Sequences that all begin with the same `prefix` tokens (a system turn), learned after."""
    head = torch.randint(1, 64, (prefix,), generator=torch.Generator().manual_seed(seed)).tolist()
    return [Seq(head + list(s.ids), prefix + s.start) for s in _seqs(lengths, seed=seed)]


def test_the_tokens_all_sequences_begin_with_become_the_prefix() -> None:
    seqs = _prefixed([5, 20, 7, 13, 8, 6])
    batch = make_batch(seqs)
    assert batch.prefix is not None and batch.prefix[0].tolist() == list(seqs[0].ids[:10])
    assert batch.ids.shape == (3, 20)  # the rows hold only what follows the prefix
    assert batch.labels.tolist() == [t for s in seqs for t in s.ids[s.start + 1 :]]
    assert shared_length(seqs) == 10
    assert shared_length(seqs[:1]) == 0  # one sequence: nothing to share
    assert shared_length(_seqs([5, 20, 7])) == 0  # random sequences share nothing
    late = [Seq(s.ids, 4) for s in seqs]  # a learned position inside the common part
    assert shared_length(late, least=1) == 4
    assert make_batch(seqs, share=False).prefix is None


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("lengths", [[5, 20, 7, 13, 8, 6], [6, 6, 6]])
def test_hidden_states_with_a_shared_prefix_equal_each_sequence_alone(
    lengths: list[int], attn: str
) -> None:
    """Packed rows and one sequence per row ([6, 6, 6]) alike; float64 weights (eager takes
    its softmax in float32)."""
    model = tiny_llama(0, attn_implementation=attn)
    batch = _check_alone(model, _prefixed(lengths), 1e-9 if attn == "sdpa" else 1e-5)
    assert batch.prefix is not None
