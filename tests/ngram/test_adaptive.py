"""Adaptive draft depth: calibration, cutting, learning from verdicts, picking a drafter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvspec.decoding.drafts import Draft, one_hot
from kvspec.decoding.tree import ROOT
from kvspec.ngram.adaptive import (
    FALLBACK,
    AdaptiveBranches,
    AdaptiveDrafter,
    Calibration,
    Fallback,
)


class Fixed:
    """A drafter that always proposes the same tokens with given confidences and lengths."""

    def __init__(self, tokens: list[int], confs: list[float], lengths: list[int]) -> None:
        self.tokens, self.confs, self.lengths = tokens, confs, lengths

    def propose(self, context: list[int], k: int) -> Draft:
        n = min(k, len(self.tokens))
        pairs = zip(self.tokens[:n], self.confs[:n], strict=True)
        # the rest spread over 4 other ids: the top-1 probability stays c for c >= 0.2
        dists = [{t: c, **{-i: (1 - c) / 4 for i in range(1, 5)}} for t, c in pairs]
        return Draft(self.tokens[:n], one_hot(self.tokens[:n]), self.lengths[0], 1, dists,
                     self.lengths[:n])  # fmt: skip


def _rows(length: int, conf: float, hits: int, misses: int) -> pd.DataFrame:
    tokens = [1] * (hits + misses)
    modes = [1] * hits + [2] * misses
    n = hits + misses
    return pd.DataFrame(
        {"suffix_len": [length] * n, "q_top1": [conf] * n, "q_mode": modes, "token": tokens}
    )


def _shrunk(h: float, m: float, big_h: float, big_m: float) -> float:
    pooled = (big_h + 1) / (big_h + big_m + 2)
    return (h + Calibration.SHRINK * pooled) / (h + m + Calibration.SHRINK)


def test_calibration_from_rows_is_shrunk_to_the_sources_rate():
    rows = pd.concat([_rows(8, 0.9, 18, 0), _rows(1, 0.3, 0, 8), _rows(1, 0.0, 5, 0)])
    cal = Calibration.from_rows(rows, weight=1.0)  # rows without an n-gram are skipped
    assert cal.estimate("index", 8, 0.9) == pytest.approx(_shrunk(18, 0, 18, 8))
    assert cal.estimate("index", 1, 0.3) == pytest.approx(_shrunk(0, 8, 18, 8))
    assert cal.estimate("index", 3, 0.5) == pytest.approx(19 / 28)  # empty bin: the pooled rate
    assert cal.estimate("local", 8, 0.9) == pytest.approx(0.5)  # unseen source: 1/2
    half = Calibration.from_rows(rows, weight=0.5)
    assert half.estimate("index", 8, 0.9) == pytest.approx(_shrunk(9, 0, 9, 4))


def test_draft_is_cut_where_the_running_product_falls_below_the_threshold():
    cal = Calibration.from_rows(pd.concat([_rows(8, 0.9, 40, 0), _rows(1, 0.3, 0, 40)]))
    good = Fixed([5, 6, 7, 8, 9], [0.9] * 5, [8] * 5)
    drafter = AdaptiveDrafter({"index": good}, cal, threshold=0.5)
    draft = drafter.propose([1], 5)
    p = cal.estimate("index", 8, 0.9)
    assert len(draft.tokens) == max(j for j in range(6) if p**j >= 0.5) > 0
    assert draft.tokens == [5, 6, 7, 8, 9][: len(draft.tokens)]
    assert len(draft.q) == len(draft.dists) == len(draft.lengths) == len(draft.tokens)
    bad = AdaptiveDrafter({"index": Fixed([5, 6], [0.3] * 2, [1] * 2)}, cal, threshold=0.5)
    assert bad.propose([1], 5).tokens == []  # nothing worth verifying: no draft


def test_rejections_lower_trust_and_acceptances_raise_it():
    drafter = AdaptiveDrafter({"local": Fixed([3, 4, 5, 6], [1.0] * 4, [2] * 4)}, threshold=0.3)
    assert len(drafter.propose([0], 4).tokens) == 1  # 1/2 per token: 0.5, then 0.25 < 0.3
    for _ in range(6):
        drafter.propose([0], 4)
        drafter.feedback(drafted=1, accepted=1)
    assert len(drafter.propose([0], 4).tokens) == 4  # after six hits
    drafter.feedback(drafted=4, accepted=4)
    for _ in range(40):  # 11 hits, 40 misses
        drafter.propose([0], 4)
        drafter.feedback(drafted=4, accepted=0)
    assert drafter.propose([0], 4).tokens == []


def test_misses_in_one_bin_lower_the_estimate_of_unseen_bins():
    cal = Calibration()
    for _ in range(20):
        cal.update("index", 2, 0.9, hit=False)
    assert cal.estimate("index", 12, 0.3) < 0.1  # never seen, but the source is rarely right
    assert cal.estimate("local", 12, 0.3) == pytest.approx(0.5)


def test_cost_model_fits_verification_time():
    from kvspec.ngram.adaptive import CostModel

    cost = CostModel()
    for _ in range(3):
        cost.add(1, 0.10)
    assert cost.fit() is None  # one position count only: slope unknown
    for _ in range(3):
        cost.add(9, 0.18)
    a, b = cost.fit()
    assert a == pytest.approx(0.09) and b == pytest.approx(0.01)


def test_with_a_known_cost_the_cut_maximises_tokens_per_second():
    cal = Calibration.from_rows(_rows(8, 0.9, 30, 10))  # 0.74 per token, roughly
    drafter = AdaptiveDrafter({"index": Fixed([1, 2, 3, 4, 5, 6], [0.9] * 6, [8] * 6)}, cal,
                              threshold=0.2)  # fmt: skip
    p = cal.estimate("index", 8, 0.9)
    for steep, want in ((0.001, 6), (0.5, 0)):  # cheap extra positions: draft all; dear: none
        drafter.cost = type(drafter.cost)()
        for n in (1, 1, 1, 7, 7, 7):
            drafter.cost.add(n, 0.1 + steep * n)
        rates = [
            (1 + sum(p ** (j + 1) for j in range(n))) / (0.1 + steep * (n + 1)) for n in range(7)
        ]
        assert want == int(np.argmax(rates))
        assert len(drafter.propose([0], 6).tokens) == want
    drafter.feedback(0, 0, seconds=0.2)  # an empty draft still teaches the cost


def test_hybrid_picks_the_draft_with_more_expected_accepted_tokens():
    cal = Calibration.from_rows(pd.concat([_rows(8, 0.9, 60, 0), _rows(1, 0.4, 2, 30)]))
    local = Fixed([7, 7, 7], [1.0] * 3, [2] * 3)  # unseen source: 1/2 per token
    strong = Fixed([1, 2, 3, 4], [0.9] * 4, [8] * 4)
    weak = Fixed([1, 2, 3, 4], [0.4] * 4, [1] * 4)
    best = AdaptiveDrafter({"local": local, "index": strong}, cal, threshold=0.3).propose([0], 4)
    assert best.tokens == [1, 2, 3, 4]
    hybrid = AdaptiveDrafter({"local": local, "index": weak}, cal, threshold=0.3)
    assert hybrid.propose([0], 4).tokens == [7]
    assert hybrid.chosen == {"local": 1, "index": 0}


def test_needs_a_drafter():
    with pytest.raises(ValueError, match="at least one"):
        AdaptiveDrafter({}, threshold=0.2)


def _branches(steep: float, index: Fixed, local: Fixed) -> AdaptiveBranches:
    cal = Calibration.from_rows(_rows(8, 0.9, 30, 10))
    drafter = AdaptiveDrafter({"index": index, "local": local}, cal, threshold=0.2)
    for n in (1, 1, 1, 7, 7, 7):
        drafter.cost.add(n, 0.1 + steep * n)
    return AdaptiveBranches(drafter, 4)


def test_a_second_branch_is_verified_only_when_it_pays():
    index = Fixed([1, 2, 3, 4], [0.9] * 4, [8] * 4)
    local = Fixed([7, 8, 9], [1.0] * 3, [2] * 3)  # unseen source: 1/2 per token
    cheap = _branches(0.001, index, local).propose_tree([0], 16)
    assert cheap.tokens == [1, 2, 3, 4, 7, 8, 9]
    assert cheap.parents == [ROOT, 0, 1, 2, ROOT, 4, 5]
    assert all(a > b for a, b in zip(cheap.scores[:3], cheap.scores[1:4], strict=True))
    # p = 0.75 a token from the index, 0.5 from the unseen local source; cost 0.1 + b·positions.
    # b = 0.03: the index's 3 tokens give 2.73 / 0.22 = 12.4 tokens/s (4: 12.2), the local 7
    # beside them 3.23 / 0.25 = 12.9, 7 and 8 3.48 / 0.28 = 12.4
    assert _branches(0.03, index, local).propose_tree([0], 16).tokens == [1, 2, 3, 7]
    # b = 0.2: the index's first token alone (1.75 / 0.5 = 3.5); the local 7 beside it 3.2
    assert _branches(0.2, index, local).propose_tree([0], 16).tokens == [1]
    same_start = Fixed([1, 8, 9], [1.0] * 3, [2] * 3)
    assert _branches(0.001, index, same_start).propose_tree([0], 16).tokens == [1, 2, 3, 4]
    assert _branches(0.001, index, local).propose_tree([0], 2).tokens == [1, 2, 7, 8]


def test_tree_feedback_counts_every_branchs_verdicts_and_the_cost():
    branches = _branches(0.001, Fixed([1, 2, 3, 4], [0.9] * 4, [8] * 4),
                         Fixed([7, 8, 9], [1.0] * 3, [2] * 3))  # fmt: skip
    cal = branches.adaptive.calibration
    before = {s: list(t) for s, t in cal.totals.items()}
    tree = branches.propose_tree([0], 16)
    branches.tree_feedback(tree, [4, 5], seconds=0.3)  # the target took 7, 8, then not 9
    assert cal.totals["local"] == [2.0, 1.0]  # 7, 8 hit, 9 missed
    assert cal.totals["index"] == [before["index"][0], before["index"][1] + 1.0]  # 1 missed
    assert branches.adaptive.cost.seen[8] == 1  # 7 nodes + the root's position
    assert branches.chosen == {"index": 1, "local": 0} and branches.second == 1


def test_branches_need_a_depth():
    with pytest.raises(ValueError, match="k >= 1"):
        AdaptiveBranches(AdaptiveDrafter({"x": Fixed([1], [1.0], [1])}, threshold=0.2), 0)


class Model:
    """A drafter reporting its own top-1 probabilities (as `DraftModelDrafter` does); counts
    its calls."""

    def __init__(self, tokens: list[int], confs: list[float]) -> None:
        self.tokens, self.confs, self.calls = tokens, confs, 0

    def propose(self, context: list[int], k: int) -> Draft:
        self.calls += 1
        n = min(k, len(self.tokens))
        return Draft(self.tokens[:n], one_hot(self.tokens[:n]), confidence=self.confs[:n])


def _with_fallback(index: Fixed, model: Model, gate: float, k: int = 8) -> AdaptiveDrafter:
    cal = Calibration.from_rows(pd.concat([_rows(8, 0.9, 60, 0), _rows(1, 0.4, 2, 30)]))
    for _ in range(20):  # the model's drafts: accepted when it is sure, rejected when not
        cal.update(FALLBACK, 0, 0.97, True)
        cal.update(FALLBACK, 0, 0.5, False)
    return AdaptiveDrafter({"index": index}, cal, threshold=0.2,
                           fallback=Fallback(model, gate, k))  # fmt: skip


def test_the_fallback_drafts_only_where_the_others_expect_less_than_its_gate():
    strong = Fixed([1, 2, 3, 4], [0.9] * 4, [8] * 4)
    model = Model([7, 8, 9], [0.97, 0.97, 0.5])
    drafter = _with_fallback(strong, model, gate=1.0)
    assert drafter.propose([0], 4).tokens == [1, 2, 3, 4]  # expects ~3 tokens: not consulted
    assert model.calls == 0 == drafter.consulted
    weak = Fixed([1, 2, 3, 4], [0.4] * 4, [1] * 4)
    drafter = _with_fallback(weak, model, gate=1.0)
    # the model's draft is cut by its own calibration: its unsure third token is dropped
    assert drafter.propose([0], 4).tokens == [7, 8]
    assert model.calls == 1 == drafter.consulted
    assert drafter.chosen == {"index": 0, FALLBACK: 1}
    drafter.feedback(2, 1)  # 7 accepted, 8 not: verdicts go to the model's bins
    assert drafter.calibration.counts[(FALLBACK, 0, 5)] == [21.0, 1.0]
    never = _with_fallback(weak, model, gate=0.0)
    assert never.propose([0], 4).tokens == [] and never.consulted == 0  # a greedy step


def test_a_fallback_draft_keeps_its_confidences_when_cut_and_its_depth_is_capped():
    model = Model([7, 8, 9, 10], [0.97] * 4)
    drafter = _with_fallback(Fixed([1], [0.4], [1]), model, gate=1.0, k=2)
    best = drafter.ranked([0], 4)[0]
    assert best.source == FALLBACK and best.draft.tokens == [7, 8]
    assert best.draft.confidence == [0.97, 0.97]


def test_fallback_settings_are_checked():
    with pytest.raises(ValueError, match="gate >= 0 and k >= 1"):
        Fallback(Model([1], [1.0]), 1.0, 0)
    with pytest.raises(ValueError, match="names the fallback"):
        AdaptiveDrafter({FALLBACK: Fixed([1], [1.0], [1])}, threshold=0.2)
