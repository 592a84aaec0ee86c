"""Adaptive draft depth: draft only tokens likely to be accepted, for any drafter.

A drafted token costs a verification position whether or not it is accepted, so a draft
should stop where the next token's expected gain (the probability that it and every token
before it are accepted) no longer pays for its position (`AdaptiveDrafter`); a drafter with
nothing good to propose then proposes nothing and the step costs what a greedy step costs.

Per-token estimates come from a `Calibration`: P(greedy acceptance | source, match-length
bin, confidence bin), a Beta posterior whose prior counts are the workflow's own acceptance
rows (`suffix_len`, `q_top1`, and whether the n-gram mode was the target's token; see
`kvspec.ngram.acceptance`) and which keeps learning from the verifier's verdicts
(`feedback`): after a rejection the same kind of draft is trusted less. `source` tells
drafters apart ("index": infini-gram, "local": prompt lookup, "model": a draft model).

With several drafters (`AdaptiveDrafter({"local": ..., "index": ...})`, the request-local
+ index hybrid), each proposes, each draft is cut, and the one with the best expected rate
is used. `AdaptiveBranches` verifies the runner-up's cut draft beside it, as a second branch
of a draft tree, when that raises the expected rate. A `Fallback` (a draft model, source
"model", binned by its own top-1 probability) costs real time to draft, so it is consulted
only on steps where the other drafters' best cut draft expects fewer than `gate` accepted
tokens: the n-gram drafts where they are strong, the model where they are not (the thesis's
"hybrid speculation" direction, §4.6.6.2; SuffixDecoding's hybrid mode falls back alike).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvspec.decoding.cache import common_prefix
from kvspec.decoding.drafts import Draft, Drafter, one_hot
from kvspec.decoding.tree import ROOT, DraftTree

LENGTH_EDGES = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)  # bin i: LENGTH_EDGES[i] <= len < next
CONF_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)  # bin i: CONF_EDGES[i] <= top-1 prob < next
Bin = tuple[str, int, int]  # (source, length bin, confidence bin)


def _bin(edges: Sequence[float], value: float) -> int:
    return bisect.bisect_right(edges, value) - 1


@dataclass
class Calibration:
    """Acceptance estimates per (source, length bin, confidence bin), shrunk to the source's.

    A bin with h hits and m misses estimates (h + S·p_src) / (h + m + S), where p_src =
    (H + 1) / (H + M + 2) pools every bin of the source and S = `SHRINK` pseudo-verdicts:
    an empty bin starts at what the drafter achieves overall, not at 1/2, so a drafter
    that is rarely right stops drafting after a few verdicts anywhere.
    """

    counts: dict[Bin, list[float]] = field(default_factory=dict)  # bin -> [hits, misses]
    totals: dict[str, list[float]] = field(default_factory=dict)  # source -> [hits, misses]
    prior_weight: float = 1.0
    SHRINK = 2.0

    def estimate(self, source: str, length: int, confidence: float) -> float:
        """Posterior mean probability that a token drafted from this bin is accepted."""
        big_h, big_m = self.totals.get(source, (0.0, 0.0))
        pooled = (big_h + 1.0) / (big_h + big_m + 2.0)
        hits, misses = self.counts.get(self.key(source, length, confidence), (0.0, 0.0))
        return (hits + self.SHRINK * pooled) / (hits + misses + self.SHRINK)

    def update(
        self, source: str, length: int, confidence: float, hit: bool, w: float = 1.0
    ) -> None:
        """Count one verdict of the verifier (weighted `w`)."""
        entry = self.counts.setdefault(self.key(source, length, confidence), [0.0, 0.0])
        total = self.totals.setdefault(source, [0.0, 0.0])
        entry[0 if hit else 1] += w
        total[0 if hit else 1] += w

    @staticmethod
    def key(source: str, length: int, confidence: float) -> Bin:
        return source, _bin(LENGTH_EDGES, length), _bin(CONF_EDGES, confidence)

    @classmethod
    def from_rows(cls, rows: Any, source: str = "index", weight: float = 1.0) -> Calibration:
        """Prior counts from acceptance rows (columns suffix_len, q_top1, q_mode, token).

        A row is a hit when the n-gram's mode is the target's greedy token (what greedy
        verification accepts). `weight` scales the prior counts (0.1: ten table rows are
        worth one verdict seen while decoding).
        """
        cal = cls(prior_weight=weight)
        rows = rows[rows["q_top1"] > 0]  # positions with no n-gram distribution
        hit = (rows["q_mode"] == rows["token"]).to_numpy()
        for length, conf, h in zip(rows["suffix_len"], rows["q_top1"], hit, strict=True):
            cal.update(source, int(length), float(conf), bool(h), weight)
        return cal


@dataclass
class CostModel:
    """Verification time ≈ a + b · positions, fit online by least squares on the decoding
    loop's timings (`add`); `fit` is None until two position counts were seen 3+ times."""

    seen: dict[int, int] = field(default_factory=dict)  # positions -> observations
    sums: list[float] = field(default_factory=lambda: [0.0] * 5)  # n, Σx, Σy, Σxx, Σxy

    def add(self, positions: int, seconds: float) -> None:
        self.seen[positions] = self.seen.get(positions, 0) + 1
        for i, v in enumerate((1.0, positions, seconds, positions**2, positions * seconds)):
            self.sums[i] += v

    def fit(self) -> tuple[float, float] | None:
        """(a, b) with a > 0 and b >= 0, or None while the data cannot separate them."""
        if sum(c >= 3 for c in self.seen.values()) < 2:
            return None
        n, sx, sy, sxx, sxy = self.sums
        b = max((n * sxy - sx * sy) / (n * sxx - sx * sx), 0.0)
        a = (sy - b * sx) / n
        return (a, b) if a > 0 else None


@dataclass(frozen=True)
class Fallback:
    """A drafter that costs real time to draft (a draft model), consulted by `AdaptiveDrafter`
    only when the other drafters' best cut draft expects fewer than `gate` accepted tokens;
    its draft holds at most `k` tokens and is cut like the others (source `FALLBACK`)."""

    drafter: Drafter
    gate: float
    k: int

    def __post_init__(self) -> None:
        if self.gate < 0 or self.k < 1:
            raise ValueError(f"Fallback needs gate >= 0 and k >= 1, got {self.gate}, {self.k}")


FALLBACK = "model"  # the calibration's source name of a fallback's drafts


@dataclass
class ScoredDraft:
    """A drafter's draft cut by `AdaptiveDrafter`, with what the cut was based on."""

    source: str
    draft: Draft
    probs: list[float]  # estimated acceptance of each kept token, given the earlier ones
    rate: float  # what the cut maximised: expected tokens per second, or expected accepted


class AdaptiveDrafter:
    """Draft from one or several drafters, cut each draft where acceptance gets unlikely.

    `drafters`: source name -> drafter. Each draft is cut at the length that maximises
    expected tokens per second of verification, (1 + Σ_j P(tokens 0..j accepted)) /
    (a + b · (length + 1)), with the verification cost a + b · positions learnt from the
    loop's timings (`CostModel`); length 0 (no draft, a greedy step) when nothing beats it.
    Until the cost is known, a draft keeps token j while P(tokens 0..j accepted) is at
    least `threshold`. The decoding loop calls `feedback(drafted, accepted, seconds)`
    after every verification. A `fallback` drafts (as source `FALLBACK`) only on the steps
    where the others' best cut draft expects fewer than its gate of accepted tokens
    (`consulted` counts them).
    """

    def __init__(
        self,
        drafters: Mapping[str, Drafter],
        calibration: Calibration | None = None,
        *,
        threshold: float,
        fallback: Fallback | None = None,
    ) -> None:
        if not drafters:
            raise ValueError("AdaptiveDrafter needs at least one drafter")
        if FALLBACK in drafters:
            raise ValueError(f"{FALLBACK!r} names the fallback's drafts, not a drafter")
        self.drafters = dict(drafters)
        self.calibration = calibration or Calibration()
        self.threshold = threshold
        self.fallback = fallback
        self.consulted = 0
        self.cost = CostModel()
        self._last: ScoredDraft | None = None
        sources = [*self.drafters, *([FALLBACK] if fallback else [])]
        self.chosen: dict[str, int] = dict.fromkeys(sources, 0)

    def propose(self, context: list[int], k: int) -> Draft:
        """The best cut draft of any drafter (empty if none is worth verifying)."""
        best = self.ranked(context, k)[0]
        self._last = best
        if best.probs:
            self.chosen[best.source] += 1
        return best.draft

    def ranked(self, context: list[int], k: int) -> list[ScoredDraft]:
        """Every drafter's cut draft, the best expected rate first (the first on a tie)."""
        fit = self.cost.fit()
        scored = [self._cut(n, d.propose(context, k), fit) for n, d in self.drafters.items()]
        fb = self.fallback
        if fb is not None and expected_accepted(max(scored, key=lambda s: s.rate)) < fb.gate:
            self.consulted += 1
            scored.append(self._cut(FALLBACK, fb.drafter.propose(context, min(fb.k, k)), fit))
        return sorted(scored, key=lambda s: -s.rate)

    def learn(self, scored: ScoredDraft, accepted: int) -> None:
        """Count the verdicts on a cut draft of which `accepted` leading tokens were kept."""
        for j in range(min(len(scored.probs), accepted + 1)):
            length, conf = _features(scored.draft, j)
            self.calibration.update(scored.source, length, conf, j < accepted)

    def feedback(self, drafted: int, accepted: int, seconds: float | None = None) -> None:
        """Learn from the verifier: kept tokens 0..accepted-1 hit, token `accepted` missed;
        `seconds` is the verification time of `drafted + 1` positions."""
        if seconds is not None:
            self.cost.add(drafted + 1, seconds)
        last, self._last = self._last, None
        if last is not None and drafted:
            self.learn(replace(last, probs=last.probs[:drafted]), accepted)

    def _cut(self, source: str, draft: Draft, fit: tuple[float, float] | None) -> ScoredDraft:
        """Estimates token by token, stopped at the first token that does not pay: the running
        product of estimates never grows, so once one more token lowers the rate (or, before
        the cost is fitted, takes the product below the threshold) every longer draft does."""
        probs: list[float] = []
        cum, total = 1.0, 0.0  # P(tokens 0..j accepted), and its sum over the kept tokens
        best = 0.0 if fit is None else 1.0 / (fit[0] + fit[1])  # no draft: a greedy step
        for j in range(len(draft.tokens)):
            p = self.calibration.estimate(source, *_features(draft, j))
            if fit is None:
                if cum * p < self.threshold:
                    break
                rate = total + cum * p
            else:
                rate = (1.0 + total + cum * p) / (fit[0] + fit[1] * (j + 2))
                if rate <= best:  # first maximum: the shorter draft on a tie
                    break
            cum *= p
            total += cum
            probs.append(p)
            best = rate
        return ScoredDraft(source, _truncate(draft, len(probs)), probs, best)


def expected_accepted(scored: ScoredDraft) -> float:
    """Expected accepted tokens of a cut draft: Σ_j P(tokens 0..j accepted)."""
    return float(np.sum(np.cumprod(scored.probs))) if scored.probs else 0.0


def _features(draft: Draft, j: int) -> tuple[int, float]:
    """(match length, confidence) behind draft token j: a model draft's own top-1 probability
    (length 0); (0, 1.0) when the drafter gives neither."""
    if draft.confidence:
        return 0, float(draft.confidence[j])
    length = draft.lengths[j] if draft.lengths else draft.match_len
    conf = max(draft.dists[j].values()) if draft.dists and draft.dists[j] else 1.0
    return int(length), float(conf)


def _truncate(draft: Draft, n: int) -> Draft:
    """The first n tokens of a draft, with the matching proposal rows."""
    if n == len(draft.tokens):
        return draft
    q = draft.q[:n] if draft.q is not None else one_hot(draft.tokens[:n])
    return replace(
        draft,
        tokens=draft.tokens[:n],
        q=q,
        dists=draft.dists[:n] if draft.dists else draft.dists,
        lengths=draft.lengths[:n] if draft.lengths else draft.lengths,
        confidence=draft.confidence[:n] if draft.confidence else draft.confidence,
    )


class AdaptiveBranches:
    """An `AdaptiveDrafter`'s best cut draft, and the runner-up drafter's beside it as a second
    branch of one draft tree when it starts with another token and raises the expected rate.

    Branches that start differently cannot both be accepted, so the tree's expected accepted
    length is the sum of the branches' (1 + Σ_j P(tokens 0..j of either branch accepted)),
    and its verification costs a + b · (1 + both lengths). The second branch is cut at the
    length that maximises that rate; it is added only when the cost is fitted and the rate
    beats the best branch alone. The tree loop reports the accepted path (`tree_feedback`),
    and every branch's tokens are counted as verdicts, as the chain loop's `feedback` does.
    """

    def __init__(self, adaptive: AdaptiveDrafter, k: int) -> None:
        if k < 1:
            raise ValueError(f"AdaptiveBranches needs k >= 1, got {k}")
        self.adaptive, self.k = adaptive, k
        self.second = 0  # trees with a second branch
        self._branches: list[ScoredDraft] = []

    @property
    def chosen(self) -> dict[str, int]:
        """Steps whose first branch each source drafted."""
        return self.adaptive.chosen

    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        """The best cut draft as a branch, plus the runner-up's if it pays (depth <= k)."""
        ranked = self.adaptive.ranked(context, min(self.k, max_depth))
        best = ranked[0]
        branches = [best] if best.probs else []
        fit = self.adaptive.cost.fit()
        if branches and fit is not None and len(ranked) > 1:
            other = _second_branch(best, ranked[1], fit)
            if other is not None:
                branches.append(other)
                self.second += 1
        if branches:
            self.adaptive.chosen[best.source] += 1
        self._branches = branches
        return _tree_of(branches)

    def tree_feedback(self, tree: DraftTree, path: list[int], seconds: float | None) -> None:
        """Learn from the verifier: `path` holds the accepted nodes from the root down and
        `seconds` the verification time of the tree's nodes + 1 positions."""
        if seconds is not None:
            self.adaptive.cost.add(len(tree.tokens) + 1, seconds)
        accepted = [tree.tokens[i] for i in path]
        for branch in self._branches:
            self.adaptive.learn(branch, common_prefix(branch.draft.tokens, accepted))
        self._branches = []


def _second_branch(
    best: ScoredDraft, other: ScoredDraft, fit: tuple[float, float]
) -> ScoredDraft | None:
    """`other` cut to its best length as a branch beside `best`, or None if it does not pay."""
    if not other.probs or other.draft.tokens[0] == best.draft.tokens[0]:
        return None
    a, b = fit
    gain = 1.0 + expected_accepted(best)
    width = 1 + len(best.probs)
    cum = np.cumprod(other.probs)
    rates = (gain + np.cumsum(cum)) / (a + b * (width + np.arange(1, len(cum) + 1)))
    n = int(np.argmax(rates)) + 1
    if rates[n - 1] <= gain / (a + b * width):
        return None
    rate = float(rates[n - 1])
    return ScoredDraft(other.source, _truncate(other.draft, n), other.probs[:n], rate)


def _tree_of(branches: Sequence[ScoredDraft]) -> DraftTree:
    """The branches as chains hanging from the root, each node scored by the log of its
    estimated chance to be accepted."""
    tree = DraftTree()
    for branch in branches:
        parent = ROOT
        for token, p in zip(branch.draft.tokens, np.cumprod(branch.probs), strict=True):
            tree.tokens.append(int(token))
            tree.parents.append(parent)
            tree.scores.append(float(np.log(max(p, 1e-30))))
            parent = len(tree.tokens) - 1
    return tree
