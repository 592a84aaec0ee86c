"""Adaptive draft depth: calibration, cutting, learning from verdicts, picking a drafter."""

from __future__ import annotations

import pandas as pd
import pytest

from kvspec.spec.adaptive import AdaptiveDrafter, Calibration
from kvspec.spec.drafters import Draft, one_hot


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


def test_calibration_from_rows_is_a_beta_posterior_per_bin():
    rows = pd.concat([_rows(8, 0.9, 18, 0), _rows(1, 0.3, 0, 8), _rows(1, 0.0, 5, 0)])
    cal = Calibration.from_rows(rows, weight=1.0)
    assert cal.estimate("index", 8, 0.9) == pytest.approx(19 / 20)
    assert cal.estimate("index", 1, 0.3) == pytest.approx(1 / 10)
    assert cal.estimate("index", 1, 0.0) == pytest.approx(0.5)  # no n-gram: rows skipped
    assert cal.estimate("local", 8, 0.9) == pytest.approx(0.5)  # other source: prior only
    assert Calibration.from_rows(rows, weight=0.5).estimate("index", 8, 0.9) == pytest.approx(
        10 / 11
    )


def test_draft_is_cut_where_the_running_product_falls_below_the_threshold():
    cal = Calibration.from_rows(pd.concat([_rows(8, 0.9, 8, 0), _rows(1, 0.3, 0, 8)]))
    good = Fixed([5, 6, 7, 8, 9], [0.9] * 5, [8] * 5)  # 0.9 each: 0.9, 0.81, 0.73, ...
    drafter = AdaptiveDrafter({"index": good}, cal, threshold=0.5)
    draft = drafter.propose([1], 5)
    assert draft.tokens == [5, 6, 7, 8, 9][: len(draft.tokens)]
    p = 9 / 10
    assert len(draft.tokens) == max(j for j in range(6) if p**j >= 0.5)
    assert len(draft.q) == len(draft.dists) == len(draft.lengths) == len(draft.tokens)
    bad = AdaptiveDrafter({"index": Fixed([5, 6], [0.3] * 2, [1] * 2)}, cal, threshold=0.5)
    assert bad.propose([1], 5).tokens == []  # nothing worth verifying: no draft


def test_rejections_lower_trust_and_acceptances_raise_it():
    drafter = AdaptiveDrafter({"local": Fixed([3, 4, 5, 6], [1.0] * 4, [2] * 4)}, threshold=0.3)
    first = len(drafter.propose([0], 4).tokens)  # prior 0.5 per token: 0.5, 0.25 -> 1 token
    assert first == 1
    for _ in range(6):
        drafter.propose([0], 4)
        drafter.feedback(drafted=1, accepted=1)
    assert len(drafter.propose([0], 4).tokens) == 4  # 7/8 per token after six hits
    drafter.feedback(drafted=4, accepted=4)
    for _ in range(40):  # 11 hits, 40 misses: 12/53 < 0.3
        drafter.propose([0], 4)
        drafter.feedback(drafted=4, accepted=0)
    assert drafter.propose([0], 4).tokens == []


def test_hybrid_picks_the_draft_with_more_expected_accepted_tokens():
    cal = Calibration.from_rows(pd.concat([_rows(8, 0.9, 30, 0), _rows(1, 0.4, 2, 8)]))
    local = Fixed([7, 7, 7], [1.0] * 3, [2] * 3)  # prior only: 0.5 per token
    strong = Fixed([1, 2, 3, 4], [0.9] * 4, [8] * 4)
    weak = Fixed([1, 2, 3, 4], [0.4] * 4, [1] * 4)
    assert AdaptiveDrafter({"local": local, "index": strong}, cal, 0.3).propose([0], 4).tokens == [
        1, 2, 3, 4,
    ]  # fmt: skip
    hybrid = AdaptiveDrafter({"local": local, "index": weak}, cal, threshold=0.3)
    assert hybrid.propose([0], 4).tokens == [7]
    assert hybrid.chosen == {"local": 1, "index": 0}


def test_needs_a_drafter():
    with pytest.raises(ValueError, match="at least one"):
        AdaptiveDrafter({})
