"""Record-based acceptance statistics: the direct, per-position definitions the tests hold
`kvspec.ngram.acceptance_stats` (row-based, what the workflow uses) to.

Each works on `PositionRecord`s (dense target distribution p, sparse n-gram q), computing
1 - TV(p, q) afresh, so it shares no code with the row tables it checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvspec.ngram.acceptance import PositionRecord, top1, tv_acceptance
from kvspec.ngram.drafters import greedy_token

MATCH_LENGTH_BINS = (0, 2, 4, 6, 8, 10, 12, 14, 16)
CONFIDENCE_THRESHOLDS = (None, 0.5, 0.6, 0.7)
HIT_LENGTHS = (0, 4, 8, 16)


def acceptance_by_match_length(
    records: Sequence[PositionRecord], bins: Sequence[int] = MATCH_LENGTH_BINS
) -> dict[int, dict[str, float]]:
    """Mean acceptance over positions whose matched suffix is at least each bin's length."""
    return {b: _summary([r for r in records if r.suffix_len >= b], len(records)) for b in bins}


def acceptance_by_confidence(
    records: Sequence[PositionRecord],
    thresholds: Sequence[float | None] = CONFIDENCE_THRESHOLDS,
) -> dict[str, dict[str, float]]:
    """Mean acceptance over positions whose q top-1 probability exceeds each threshold."""
    out = {}
    for t in thresholds:
        kept = [r for r in records if t is None or top1(r.q) > t]
        out["all" if t is None else f">{t}"] = _summary(kept, len(records))
    return out


def _summary(kept: Sequence[PositionRecord], total: int) -> dict[str, float]:
    """Mean acceptance, number of positions, and their share of all positions."""
    scores = [tv_acceptance(r.p, r.q) for r in kept]
    mean = sum(scores) / len(scores) if scores else float("nan")
    return {"acceptance": mean, "n": len(kept), "coverage": len(kept) / total if total else 0.0}


def match_hit_rates(
    records: Sequence[PositionRecord], lengths: Sequence[int] = HIT_LENGTHS
) -> dict[int, float]:
    """Share of positions whose context matched a suffix of at least each length."""
    n = len(records)
    return {m: sum(r.suffix_len >= m for r in records) / n if n else 0.0 for m in lengths}


def greedy_hits(records: Sequence[PositionRecord], confidence: float = 0.0) -> list[bool]:
    """Per position: would the greedy n-gram draft equal the target's token (and pass the cut)?"""
    return [bool(r.q) and top1(r.q) >= confidence and greedy_token(r.q) == r.token for r in records]


def expected_accepted_tokens(
    records: Sequence[PositionRecord], k: int, confidence: float = 0.0
) -> float:
    """Mean drafts accepted per speculation of length k under greedy verification.

    Replays speculation along the greedy output: while drafts are accepted the drafter's
    context equals the output prefix, so draft j of a speculation is the n-gram mode at
    that position, and the first miss (or k hits) ends the speculation. As in
    `speculative_generate`, the last output token is always the target's own.
    """
    hits = greedy_hits(records, confidence)
    accepted, pos = [], 0
    while pos < len(hits):
        a = 0
        while a < k and pos + a < len(hits) - 1 and hits[pos + a]:
            a += 1
        accepted.append(a)
        pos += a + 1
    return sum(accepted) / len(accepted) if accepted else 0.0
