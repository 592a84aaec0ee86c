"""N-gram drafters: infini-gram's inf_nkt over a suffix-array index of earlier text, and
two over the request itself: prompt lookup and the longest earlier suffix (thesis ch. 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvspec.decoding.drafts import Dist, Draft, one_hot
from kvspec.ngram import suffix_array as sa
from kvspec.ngram.index import CheckedEngine
from kvspec.ngram.native import native


def greedy_token(counts: dict[int, int] | dict[int, float]) -> int:
    """The most frequent token; ties go to the smallest id (the engine's map order)."""
    return min(counts, key=lambda t: (-counts[t], t))


def ntd_counts(result: dict[str, Any]) -> dict[int, int]:
    """Token -> continuation count from an `ntd`/`infgram_ntd` answer."""
    return {int(t): int(r["cont_cnt"]) for t, r in result["result_by_token_id"].items()}


def sequential_infgram_draft(engine: CheckedEngine, context: list[int], k: int) -> list[int]:
    """Reference drafter: k sequential greedy `infgram_ntd` calls, each on the grown context."""
    ctx = [int(t) for t in context]
    out: list[int] = []
    for _ in range(k):
        counts = ntd_counts(engine.infgram_ntd(ctx + out))
        if not counts:
            break
        out.append(greedy_token(counts))
    return out


# ---------------------------------------------------------------- infini-gram (inf_nkt)


@dataclass
class _Match:
    """The longest matched suffix of the running context and its suffix-array ranges."""

    suffix: list[int]  # model ids
    segments: sa.Segments  # per shard, [lo, hi) ranks
    count: int


class InfiniGramDrafter:
    """inf_nkt: k greedy infini-gram tokens from one longest-suffix lookup.

    Finds the longest suffix of the context present in the index, reads the next k tokens
    after every match straight from the memory-mapped index, then replays k sequential
    greedy `infgram_ntd` picks by counting and filtering those continuations. Because the
    matches of `suffix + t` are exactly the matches of `suffix` followed by `t`, the draft
    equals k sequential `infgram_ntd` calls while a suffix has at most `max_support`
    matches. A suffix with more matches is counted on `max_support` evenly spaced
    suffix-array ranks (an offset seeded by `seed` and the range; an approximation, as the
    engine's `ntd` is, but a function of the context alone), one
    step at a time, narrowing the range exactly after each pick. When no match survives
    (a document ended) a fresh lookup continues the draft.

    Lookups run in this process (`kvspec.ngram.suffix_array`, compiled), not through the
    engine, and reuse the previous call's match: when the new context extends the previous
    one, the longest suffix is the previous match extended by the new tokens if that occurs,
    and otherwise is searched only among shorter lengths.

    `confidence`: stop drafting once a step's top-1 probability is below it.
    `min_match`: draft nothing when the context's longest indexed suffix is shorter (a
    0-token match is the corpus unigram: rarely accepted, and costly to count).
    `sample`: draw each token from the n-gram distribution instead of taking the mode.

    Tokens are the model's ids also over a compact-vocabulary index. A document end is
    reported as the engine does, as `eos_token_id`.
    """

    def __init__(
        self,
        engine: CheckedEngine,
        confidence: float = 0.0,
        sample: bool = False,
        seed: int = 0,
        min_match: int = 0,
    ) -> None:
        self.engine = engine
        self.min_match = min_match
        self.eos = engine.eos_token_id
        self.max_support = engine.max_support
        self.confidence = confidence
        self.sample = sample
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.vocab = engine.vocab
        lut = self.vocab.original_lut if self.vocab is not None else None
        self.index = sa.open_index(engine.index_dir, engine.token_dtype, lut)
        self._last: tuple[list[int], _Match] | None = None  # previous context and its match

    def propose(self, context: list[int], k: int) -> Draft:
        """Draft up to k tokens after `context` (fewer if the confidence cut-off fires)."""
        ctx = [int(t) for t in context]
        if k <= 0:
            return Draft([], [], 0, 0, [], [])
        first = self.locate(ctx)
        if len(first.suffix) < self.min_match:
            return Draft([], [], len(first.suffix), first.count, [], [])
        tokens: list[int] = []
        dists: list[Dist] = []
        lengths: list[int] = []
        match: _Match | None = first
        while len(tokens) < k:
            if match is None:
                match = self.longest_suffix(ctx + tokens)
                if len(match.suffix) < self.min_match:
                    break
            steps, match = self._step(match, k - len(tokens))
            stop = self._append(steps, tokens, dists, lengths)
            if stop or not steps:
                break
        q = dists if self.sample else one_hot(tokens)
        return Draft(tokens, q, len(first.suffix), first.count, dists, lengths)

    def distribution(self, context: list[int]) -> tuple[Dist, int, int]:
        """`infgram_ntd` of `context`: (next-token distribution, suffix length, suffix count).

        Counted from the index like a one-token draft (the engine's C++ `infgram_ntd` was
        seen to segfault on suffixes that end documents).
        """
        match = self.locate([int(t) for t in context])
        steps, _ = self._step(match, 1)
        return (steps[0][1] if steps else {}), len(match.suffix), match.count

    def locate(self, ctx: list[int]) -> _Match:
        """The longest indexed suffix of `ctx`, reusing the previous call's when it can."""
        match = self._reuse(ctx)
        if match is None:
            match = self.longest_suffix(ctx)
        self._last = (ctx, match)
        return match

    def _reuse(self, ctx: list[int]) -> _Match | None:
        if self._last is None:
            return None
        prev, old = self._last
        if len(ctx) < len(prev) or ctx[: len(prev)] != prev:
            return None
        tail = ctx[len(prev) :]
        grown = self._extend(old, tail)
        if grown.count > 0:
            return grown  # no longer suffix can occur: its prefix would beat `old`
        return self.longest_suffix(ctx, below=len(old.suffix) + len(tail))

    def longest_suffix(self, ctx: list[int], below: int | None = None) -> _Match:
        """Longest suffix of `ctx` shorter than `below` with a match (doubling, then bisecting)."""
        below = -1 if below is None else below  # -1: any length
        n, segments = self.index.longest_suffix(self._index_ids(ctx), below)
        return _Match(ctx[len(ctx) - n :] if n else [], segments, sa.count(segments))

    def continuations(self, match: _Match, m: int, ranks: np.ndarray | None = None) -> np.ndarray:
        """The m tokens after every match (or after the matches at global `ranks`), -1 once
        the document has ended.  # (count, m)"""
        return self._rows(match, m, ranks).array()

    def _rows(self, match: _Match, m: int, ranks: np.ndarray | None = None) -> Any:
        """`continuations` as the compiled `Rows` a walk narrows in place."""
        picked = None if ranks is None else np.asarray(ranks, dtype=np.int64).tolist()
        return self.index.rows(match.segments, len(match.suffix), m, picked)

    def _extend(self, match: _Match, tail: list[int]) -> _Match:
        ids = self._index_ids(tail)
        segments = sa.extend(self.index, match.segments, len(match.suffix), ids)
        return _Match(match.suffix + list(tail), segments, sa.count(segments))

    def _index_ids(self, ids: list[int]) -> list[int]:
        """Query ids as the index stores them (ids outside the corpus match nothing)."""
        return self.vocab.to_compact(ids) if self.vocab is not None else ids

    def _step(self, match: _Match, m: int) -> tuple[list[tuple[int, Dist, int]], _Match | None]:
        """Up to m picks from `match`: an exact walk, or one sampled step on a large range."""
        if match.count <= self.max_support:
            return self._walk(match, m), None
        ranks = self._spread(match.count, match.segments)
        dist = self._column(self._rows(match, 1, ranks), 0)
        pick = self._pick(dist)
        grown = self._extend(match, [pick])
        return [(pick, dist, len(match.suffix))], grown if grown.count > 0 else None

    def _spread(self, n: int, segments: sa.Segments) -> np.ndarray:
        """`max_support` evenly spaced ranks out of n.  # (max_support,)

        The offset is a hash of (seed, the match's ranges), so a context's draft does not
        depend on what the drafter was asked before.
        """
        offset = (hash((self.seed, n, *segments)) & 0xFFFFFFFF) / 2**32
        return ((np.arange(self.max_support) + offset) * (n / self.max_support)).astype(np.int64)

    def _walk(self, match: _Match, m: int) -> list[tuple[int, Dist, int]]:
        """Replay up to m sequential picks on the matches' continuations."""
        rows = self._rows(match, m)  # (count, m): the matches still agreeing
        steps: list[tuple[int, Dist, int]] = []
        for j in range(m):
            if len(rows) == 1:  # one match left: the rest is its continuation
                return steps + self._follow(rows.row(0, j), len(match.suffix) + j)
            dist = self._column(rows, j)
            pick = self._pick(dist)
            steps.append((pick, dist, len(match.suffix) + j))
            rows.keep(j, pick)  # a match that ended here never continues with the pick
            if not len(rows):
                break  # every match ended: the caller starts a fresh lookup
        return steps

    def _column(self, rows: Any, j: int) -> Dist:
        """Empirical distribution of column j of the continuations (document ends as eos), in
        ascending token order."""
        ids, counts = rows.column(j, self.eos)
        n = sum(counts)
        return {t: c / n for t, c in zip(ids, counts, strict=True)}

    def _follow(self, tokens: list[int], length: int) -> list[tuple[int, Dist, int]]:
        """The picks along one match's continuation (`tokens`, -1 once it ended) whose suffix
        is `length` tokens long: each token with certainty, and after the end the document
        end, after which the walk stops (what `_walk` does, one column at a time)."""
        steps: list[tuple[int, Dist, int]] = []
        for i, token in enumerate(tokens):
            pick = self.eos if token < 0 else token
            dist = {pick: 1.0}
            steps.append((self._pick(dist), dist, length + i))
            if token < 0:
                break
        return steps

    def _pick(self, dist: Dist) -> int:
        if not self.sample:
            return greedy_token(dist)
        ids = list(dist)
        return int(ids[self.rng.choice(len(ids), p=np.array([dist[t] for t in ids]))])

    def _append(
        self,
        steps: list[tuple[int, Dist, int]],
        tokens: list[int],
        dists: list[Dist],
        lengths: list[int],
    ) -> bool:
        """Append picks until the confidence cut-off; True if it fired."""
        for pick, dist, length in steps:
            if max(dist.values()) < self.confidence:
                return True
            tokens.append(pick)
            dists.append(dist)
            lengths.append(length)
        return False


# ---------------------------------------------------------------- prompt lookup


class PromptLookupDrafter:
    """Copy what followed an earlier occurrence of the context's last n-gram.

    Tries n-gram sizes from `max_ngram` down to `min_ngram`; drafts the tokens after the
    `policy` occurrence: "earliest" (Hugging Face's prompt lookup, with its default
    `max_ngram` 2, so the two rows of the benchmark differ only in the decoding loop) or
    "latest" (the most recent one; inside a loop its draft is capped at the loop period).
    """

    def __init__(self, max_ngram: int = 2, min_ngram: int = 1, policy: str = "earliest") -> None:
        if policy not in ("earliest", "latest"):
            raise ValueError(f"policy must be 'earliest' or 'latest', not {policy!r}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.policy = policy

    def propose(self, context: list[int], k: int) -> Draft:
        """Draft up to k tokens copied from the context itself."""
        ctx = np.asarray([int(t) for t in context], dtype=np.int64)
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            starts = _ngram_starts(ctx, n)  # earlier occurrences with a continuation
            if len(starts):
                begin = int(starts[0 if self.policy == "earliest" else -1]) + n
                tokens = ctx[begin : begin + k].tolist()
                return Draft(tokens, one_hot(tokens), n, len(starts), lengths=[n] * len(tokens))
        return Draft([], [], 0, 0)


class RequestSuffixDrafter:
    """Copy what most often followed the longest earlier occurrence of the context's suffix.

    The request-local counterpart of inf_nkt (SuffixDecoding's per-request tree, as a chain):
    finds the longest suffix of the context, up to `max_match` tokens, that also ends at
    earlier positions of the context, then follows those occurrences token by token, each
    time taking the continuation most of the surviving ones share (a tie goes to the one
    that occurs first) and keeping only the occurrences that continue with it. An occurrence
    whose continuation reaches the present goes on with the tokens drafted so far, so inside
    a loop of period p the draft repeats the loop instead of stopping after p tokens (in a
    run of one repeated token it drafts k, not 1). Each token's
    `dists` entry is the share of all occurrences continuing through it, so a draft's
    confidence falls where the occurrences disagree; `lengths` is the match length.
    Nothing is drafted when the suffix matched fewer than `min_match` tokens.
    """

    def __init__(self, max_match: int = 32, min_match: int = 1) -> None:
        if not 1 <= min_match <= max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {min_match}, {max_match}")
        self.max_match, self.min_match = max_match, min_match

    def propose(self, context: list[int], k: int) -> Draft:
        """Draft up to k tokens continuing the context's longest earlier suffix."""
        n, n_ends, tokens, ids, counts = native().suffix_draft(context, self.max_match,
                                                               self.min_match, k)  # fmt: skip
        if n < self.min_match or k <= 0:
            return Draft([], [], n, n_ends, [], [])
        dists: list[Dist] = [
            {t: c / n_ends for t, c in zip(i, cs, strict=True)}  # first occurrence first
            for i, cs in zip(ids, counts, strict=True)
        ]
        return Draft(tokens, one_hot(tokens), n, n_ends, dists, [n] * len(tokens))


def _ngram_starts(ctx: np.ndarray, n: int) -> np.ndarray:
    """Start positions i < len-n where ctx[i:i+n] equals the last n tokens."""
    if n <= 0 or len(ctx) <= n:
        return np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)  # (len-n, n)
    return np.flatnonzero((windows == ctx[-n:]).all(axis=1))
