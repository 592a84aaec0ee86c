"""Training MoA and EAGLE heads against a frozen target: the validation loss falls, and a run
resumed from its checkpoint ends with the weights of an uninterrupted one."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.models.distil import DistilSpec, Sequence
from kvspec.neural.eagle import EagleHead
from kvspec.neural.head_train import HeadLoss, train_head, trainable_parameters
from kvspec.neural.independent import IndependentHead
from kvspec.neural.moa import MoAHead, MoASize
from kvspec.neural.target_states import compute_states, target_readout
from tests.tiny import tree_llama

SIZE = MoASize(lsa_intermediate=32, sa_intermediate=48, ca_intermediate=64)


def _sequences(target, n: int) -> list[Sequence]:
    out = []
    for i in range(n):
        gen = torch.Generator().manual_seed(200 + i)
        prompt = torch.randint(0, 48, (5,), generator=gen).tolist()
        ids = prompt + greedy_generate(target, prompt, 20)
        out.append(Sequence(str(i), tuple(ids), len(prompt) - 1))
    return out


def _states(target):
    """The target's states of a sequence from one forward (what `StateCache` stores)."""
    return lambda ids: compute_states(target, torch.tensor([ids]), 3)


def _head(kind: str, target):
    torch.manual_seed(3)
    if kind == "independent":
        return IndependentHead(target, layers=1, intermediate=64)
    return MoAHead(target, SIZE) if kind == "moa" else EagleHead(target)


@pytest.mark.parametrize("kind", ["moa", "eagle", "independent"])
def test_validation_loss_falls(kind) -> None:
    target = tree_llama(0, layers=3)
    seqs = _sequences(target, 12)
    spec = DistilSpec(steps=80, batch_size=2, lr=5e-3, warmup_steps=2, eval_every=40, seed=0)
    head = _head(kind, target)
    curve = train_head(kind, head, target, seqs[:10], seqs[10:], spec, HeadLoss(), _states(target))
    assert [r["step"] for r in curve] == [40, 80]
    untrained = DistilSpec(steps=1, batch_size=1, lr=1e-12, eval_every=1)
    start = train_head(kind, _head(kind, target), target, seqs[:10], seqs[10:], untrained,
                       HeadLoss(), _states(target))  # fmt: skip
    key = "val_kl" if kind == "independent" else "val_loss"  # its loss is CE: KL + entropy
    assert curve[-1][key] < 0.8 * start[0][key]
    assert trainable_parameters(head) > 0


@pytest.mark.parametrize("kind", ["moa", "eagle", "independent"])
def test_training_over_a_readout_raises_agreement_with_the_target(kind) -> None:
    """Over the tokens of the training responses: the held-out top-1 agreement rises."""
    target = tree_llama(0, layers=3)
    with torch.no_grad():  # a peaked next-token law (a random one is flat: nothing to agree on)
        target.lm_head.weight.mul_(20)
    seqs = _sequences(target, 12)
    readout = target_readout(target, sorted({t for s in seqs for t in s.ids}))
    assert len(readout.weight) < target.config.vocab_size
    spec = DistilSpec(steps=80, batch_size=2, lr=5e-3, warmup_steps=2, eval_every=80, seed=0)
    untrained = DistilSpec(steps=1, batch_size=1, lr=1e-12, eval_every=1)
    start = train_head(kind, _head(kind, target), target, seqs[:10], seqs[10:], untrained,
                       HeadLoss(), _states(target), readout=readout)  # fmt: skip
    end = train_head(kind, _head(kind, target), target, seqs[:10], seqs[10:], spec, HeadLoss(),
                     _states(target), readout=readout)  # fmt: skip
    # measured: MoA 0.00 -> 0.48, EAGLE 0.02 -> 0.25, Independent 0.00 -> 0.12
    assert end[-1]["val_match"] > start[0]["val_match"] + 0.1


@pytest.mark.parametrize("kind", ["moa", "eagle"])
def test_bfloat16_training_learns_and_keeps_float32_weights(kind) -> None:
    """Under bfloat16 autocast (train.dtype) the head learns as in float32, its weights stay
    float32, and they end elsewhere (the forward did run in bfloat16)."""
    target = tree_llama(0, layers=3).float()  # autocast leaves float64 products alone
    seqs = _sequences(target, 12)
    heads, curves = {}, {}
    for dtype in ("float32", "bfloat16"):
        spec = DistilSpec(steps=40, batch_size=2, lr=5e-3, warmup_steps=2, eval_every=40,
                          seed=0, dtype=dtype)  # fmt: skip
        heads[dtype] = _head(kind, target)
        curves[dtype] = train_head(kind, heads[dtype], target, seqs[:10], seqs[10:], spec,
                                   HeadLoss(), _states(target))  # fmt: skip
    assert all(p.dtype == torch.float32 for p in heads["bfloat16"].parameters())
    params = [dict(h.named_parameters()) for h in heads.values()]
    assert any(not torch.equal(p, params[1][n]) for n, p in params[0].items())
    got, want = curves["bfloat16"][-1]["val_loss"], curves["float32"][-1]["val_loss"]
    assert got == pytest.approx(want, rel=0.1)


def test_resumed_training_equals_uninterrupted(tmp_path) -> None:
    """A full run leaves its step-4 checkpoint behind (as a killed run would); a rerun from
    it continues at step 4 and ends with the uninterrupted run's weights."""
    target = tree_llama(0, layers=3)
    seqs = _sequences(target, 6)
    spec = DistilSpec(steps=8, batch_size=2, lr=3e-3, warmup_steps=2, eval_every=4,
                      ckpt_every=4, seed=0)  # fmt: skip
    ckpt = tmp_path / "state.pt"
    whole = _head("moa", target)
    straight = train_head("moa", whole, target, seqs, [], spec, HeadLoss(), _states(target),
                          checkpoint=ckpt)  # fmt: skip
    again = _head("moa", target)
    torch.manual_seed(99)  # a different process state: nothing may depend on it
    curve = train_head("moa", again, target, seqs, [], spec, HeadLoss(), _states(target),
                       checkpoint=ckpt)  # fmt: skip
    assert [r["step"] for r in curve] == [4, 8]
    # the resumed run counts tokens on from where it stopped (it once restarted at 0)
    assert [r["tokens"] for r in curve] == [r["tokens"] for r in straight]
    for a, b in zip(whole.state_dict().values(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_an_independent_head_drafts_like_a_small_model_and_keeps_greedy() -> None:
    from kvspec.decoding.draft_model import DraftModelDrafter
    from kvspec.decoding.loop import speculative_generate

    target = tree_llama(0, layers=3)
    head = _head("independent", target)
    assert {id(p) for p in head.parameters()}.isdisjoint(id(p) for p in target.parameters())
    for prompt in ([3, 17, 5, 9, 21], [5, 5, 5, 5]):
        out, _ = speculative_generate(target, prompt, DraftModelDrafter(head), 16, 3)
        assert out == greedy_generate(target, prompt, 16)
