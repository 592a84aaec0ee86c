"""Speculative decoding under continuous batching (kvspec.decoding.batch_spec): every request
gets its plain greedy tokens whatever drafts its row, whatever the batch size and policy, with
holes in the cache squeezed out; the counters add up."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.batch_spec import SpecBatch
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate
from kvspec.lecture import scheduler as sch
from kvspec.neural.heads import build_head, make_drafter
from kvspec.ngram.drafters import PromptLookupDrafter
from tests.tiny import tiny_llama

HEADS = {
    "moa": {"kind": "moa", "tli": 1, "lsa_intermediate": 16, "sa_intermediate": 16,
            "ca_intermediate": 32},
    "eagle": {"kind": "eagle"},
    "independent": {"kind": "independent", "layers": 1, "intermediate": 32},
}  # fmt: skip


@pytest.fixture(scope="module")
def target() -> torch.nn.Module:
    return tiny_llama(0, layers=3)


def _requests() -> list[sch.Request]:
    gen = torch.Generator().manual_seed(0)
    lengths, wants = [3, 9, 5, 2, 7, 4], [12, 1, 9, 6, 2, 10]
    prompts = [torch.randint(0, 64, (n,), generator=gen).tolist() for n in lengths]
    prompts[2] = [5, 6, 7, 5, 6]  # something prompt lookup can match
    return [sch.Request(i, p, k) for i, (p, k) in enumerate(zip(prompts, wants, strict=True))]


def _drafters(target: torch.nn.Module) -> dict[str, tuple]:
    torch.manual_seed(4)
    heads = {n: build_head(target, d).eval() for n, d in HEADS.items()}
    made = {n: (lambda n=n: make_drafter(HEADS[n]["kind"], heads[n], target, None), 3)
            for n in HEADS}  # fmt: skip
    return {
        "greedy": (None, 0),
        "prompt_lookup": (PromptLookupDrafter, 4),
        "self": (lambda: DraftModelDrafter(target), 3),  # the target drafts for itself
        **made,
    }


@pytest.mark.parametrize("policy", ["continuous", "static"])
@pytest.mark.parametrize("slots", [1, 3])
def test_every_request_gets_its_greedy_tokens(target, slots: int, policy: str) -> None:
    requests = _requests()
    want = {r.rid: greedy_generate(target, r.prompt, r.new_tokens) for r in requests}
    for name, (make, k) in _drafters(target).items():
        batch = SpecBatch(target, make, k)
        finished, batch = sch.run(target, _requests(), slots, policy, batch=batch)
        assert {f.rid: f.tokens for f in finished} == want, name
        assert not batch.rows
        assert batch.accepted <= batch.drafted <= k * batch.row_drafts
        if name == "self":  # every draft of the target's own greedy choice is accepted
            assert batch.accepted == batch.drafted > 0
            assert batch.steps < sum(r.new_tokens - 1 for r in requests)
        if name == "greedy":
            assert batch.drafted == 0 and batch.steps >= max(r.new_tokens for r in requests) - 1


class _Wrong:
    """Drafts tokens the target never chooses next (its greedy choice + 1), always k of them."""

    def __init__(self, target: torch.nn.Module) -> None:
        self.target = target

    def propose(self, context: list[int], k: int):
        from kvspec.decoding.drafts import Draft

        nxt = greedy_generate(self.target, context, 1)[0]
        return Draft([(nxt + 1) % 64] * k, None)


def test_rejected_drafts_leave_holes_that_are_squeezed_out(target, monkeypatch) -> None:
    squeezed = []
    original = SpecBatch._squeeze

    def spy(self) -> None:
        before = self.mask.shape[1]
        original(self)
        squeezed.append((before, self.mask.shape[1]))
        assert torch.equal(self.mask.sum(1), self.mask.sum(1).clamp(max=self.mask.shape[1]))

    monkeypatch.setattr(SpecBatch, "_squeeze", spy)
    requests = _requests()
    batch = SpecBatch(target, lambda: _Wrong(target), 6)
    finished, batch = sch.run(target, requests, 3, "continuous", batch=batch)
    for f, r in zip(finished, requests, strict=True):
        assert f.tokens == greedy_generate(target, r.prompt, r.new_tokens)
    assert batch.accepted == 0 and batch.drafted > 0
    assert squeezed and all(after < before for before, after in squeezed)


def test_a_drafter_needs_a_depth_and_a_depth_a_drafter(target) -> None:
    with pytest.raises(ValueError, match="a drafter needs a draft depth"):
        SpecBatch(target, PromptLookupDrafter, 0)
    with pytest.raises(ValueError, match="a drafter needs a draft depth"):
        SpecBatch(target, None, 2)
