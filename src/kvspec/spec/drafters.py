"""Drafters: cheap proposers of the next k tokens that the target model then verifies.

Every drafter has `propose(context, k) -> Draft`. Deterministic drafters report one-hot
proposal distributions `q`; sampling drafters report the distribution each token was drawn
from, which is what rejection sampling needs to stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from kvspec.spec.ngram_index import CheckedEngine

Dist = dict[int, float]


@dataclass
class Draft:
    """Proposed tokens, their proposal distributions, and how the proposal was found.

    `q[i]` is the distribution `tokens[i]` was drawn from: a dict, or a row of a (k, V)
    tensor. `match_len`/`match_count` describe the lookup (suffix length and number of
    matches; 0 for model drafters). `dists` keeps the n-gram distributions of an
    infini-gram draft even when `q` is one-hot, for acceptance analysis.
    """

    tokens: list[int]
    q: list[Dist] | torch.Tensor | None
    match_len: int = 0
    match_count: int = 0
    dists: list[Dist] | None = None


class Drafter(Protocol):
    """Anything that proposes up to `k` tokens to follow `context`."""

    def propose(self, context: list[int], k: int) -> Draft: ...


def one_hot(tokens: list[int]) -> list[Dist]:
    """Point-mass proposal distributions for deterministically drafted tokens."""
    return [{t: 1.0} for t in tokens]


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
class _Shard:
    """Memory maps of one index shard: token stream and suffix array."""

    tokens: np.ndarray  # (n_tok,) u16/u32, separators included
    table: np.ndarray  # (n_tok * ptr_bytes,) u8, little-endian byte pointers into `tokens`
    ptr_bytes: int
    to_model: np.ndarray | None = None  # (65536,) compact id -> model id, compact indexes only


@dataclass
class _Match:
    """The longest matched suffix of the running context and its suffix-array ranges."""

    suffix: list[int]
    segments: list[tuple[int, int]]  # per shard, [lo, hi) ranks
    count: int


class InfiniGramDrafter:
    """inf_nkt: k greedy infini-gram tokens from one longest-suffix lookup.

    Finds the longest suffix of the context present in the index, reads the next k tokens
    after every match straight from the memory-mapped index, then replays k sequential
    greedy `infgram_ntd` picks by counting and filtering those continuations. Because the
    matches of `suffix + t` are exactly the matches of `suffix` followed by `t`, the draft
    equals k sequential `infgram_ntd` calls. When a suffix has more than `max_support`
    matches the engine subsamples, so that step is delegated to the engine's `ntd`; when
    no match survives (a document ended) a fresh lookup continues the draft.

    `confidence`: stop drafting once a step's top-1 probability is below it.
    `min_match`: draft nothing when the context's longest indexed suffix is shorter (a
    0-token match is the corpus unigram: rarely accepted, and costly to count).
    `sample`: draw each token from the n-gram distribution instead of taking the mode.

    Tokens are the model's ids also over a compact-vocabulary index: the engine translates
    queries and answers, and tokens read from the suffix array go through the same map.

    Counts here are exact. The engine's `ntd` reports a document end as `eos_token_id` and
    assumes a suffix-array range whose first and last continuations agree is uniform, so
    when eos is also a regular corpus token (not only a final one) and a suffix is followed
    both by eos and by a document end, the engine's distribution can differ from ours.
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
        self.rng = np.random.default_rng(seed)
        to_model = engine.vocab.original_lut if engine.vocab else None
        self.shards = _open_shards(engine.index_dir, engine.token_dtype, to_model)

    def propose(self, context: list[int], k: int) -> Draft:
        """Draft up to k tokens after `context` (fewer if the confidence cut-off fires)."""
        ctx = [int(t) for t in context]
        if k <= 0:
            return Draft([], [], 0, 0, [])
        tokens: list[int] = []
        dists: list[Dist] = []
        first: _Match | None = None
        match: _Match | None = None
        while len(tokens) < k:
            if match is None:
                match = self.longest_suffix(ctx + tokens)
                first = first or match
                if len(match.suffix) < self.min_match:
                    break
            if match.count <= self.max_support:
                steps, match = self._walk(match, k - len(tokens))
            else:
                steps, match = self._engine_step(match)
            stop = self._append(steps, tokens, dists)
            if stop or not steps:
                break
        q = dists if self.sample else one_hot(tokens)
        return Draft(tokens, q, len(first.suffix), first.count, dists)

    def distribution(self, context: list[int]) -> tuple[Dist, int, int]:
        """`infgram_ntd` of `context`: (next-token distribution, suffix length, suffix count).

        Counted from the index like a one-token draft instead of calling the engine's
        `infgram_ntd`, whose C++ code was seen to segfault on suffixes that end documents
        (runs of one repeated token) while `find` and this counting are safe.
        """
        match = self.longest_suffix([int(t) for t in context])
        if match.count <= self.max_support:
            steps, _ = self._walk(match, 1)
        else:
            steps, _ = self._engine_step(match)
        return (steps[0][1] if steps else {}), len(match.suffix), match.count

    def longest_suffix(self, ctx: list[int]) -> _Match:
        """Longest suffix of `ctx` with a match, found by doubling then bisecting its length."""
        best = self._find([])
        lo, hi = 0, 1
        while hi <= len(ctx):
            found = self._find(ctx[len(ctx) - hi :])
            if found.count == 0:
                break
            best, lo, hi = found, hi, hi * 2
        hi = min(hi, len(ctx) + 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            found = self._find(ctx[len(ctx) - mid :])
            if found.count == 0:
                hi = mid
            else:
                best, lo = found, mid
        return best

    def continuations(self, match: _Match, m: int) -> np.ndarray:
        """The m tokens after every match, -1 once the document has ended.  # (count, m)"""
        rows = [
            _shard_continuations(shard, lo, hi, len(match.suffix), m)
            for shard, (lo, hi) in zip(self.shards, match.segments, strict=True)
            if hi > lo
        ]
        return np.concatenate(rows) if rows else np.zeros((0, m), dtype=np.int64)

    def _find(self, suffix: list[int]) -> _Match:
        found = self.engine.find(suffix)
        segments = [(int(lo), int(hi)) for lo, hi in found["segment_by_shard"]]
        return _Match(list(suffix), segments, int(found["cnt"]))

    def _walk(self, match: _Match, m: int) -> tuple[list[tuple[int, Dist]], _Match | None]:
        """Replay up to m sequential picks on the matches' continuations."""
        conts = self.continuations(match, m)  # (count, m)
        alive = np.ones(len(conts), dtype=bool)
        steps: list[tuple[int, Dist]] = []
        for j in range(m):
            column = conts[alive, j]
            column = np.where(column < 0, self.eos, column)  # the engine reports doc end as eos
            ids, counts = np.unique(column, return_counts=True)
            dist = {int(t): int(c) / len(column) for t, c in zip(ids, counts, strict=True)}
            pick = self._pick(dist)
            steps.append((pick, dist))
            alive &= conts[:, j] == pick
            if not alive.any():
                break  # every match ended: the caller starts a fresh lookup
        return steps, None

    def _engine_step(self, match: _Match) -> tuple[list[tuple[int, Dist]], _Match | None]:
        """One step through the engine, which subsamples suffixes with > max_support matches."""
        counts = ntd_counts(self.engine.ntd(match.suffix))
        if not counts:
            return [], None
        total = sum(counts.values())
        dist = {t: c / total for t, c in counts.items()}
        pick = self._pick(dist)
        grown = self._find(match.suffix + [pick])
        return [(pick, dist)], grown if grown.count > 0 else None

    def _pick(self, dist: Dist) -> int:
        if not self.sample:
            return greedy_token(dist)
        ids = list(dist)
        return int(ids[self.rng.choice(len(ids), p=np.array([dist[t] for t in ids]))])

    def _append(self, steps: list[tuple[int, Dist]], tokens: list[int], dists: list[Dist]) -> bool:
        """Append picks until the confidence cut-off; True if it fired."""
        for pick, dist in steps:
            if max(dist.values()) < self.confidence:
                return True
            tokens.append(pick)
            dists.append(dist)
        return False


def _open_shards(
    index_dir: Path, token_dtype: str, to_model: np.ndarray | None = None
) -> list[_Shard]:
    """Memory-map every shard of an index the way the engine pairs them (sorted names).

    `to_model` maps a compact index's token ids to the model's (None: already model ids).
    """
    width = 2 if token_dtype == "u16" else 4
    ds_paths = sorted(p for p in Path(index_dir).iterdir() if "tokenized" in p.name)
    sa_paths = sorted(p for p in Path(index_dir).iterdir() if "table" in p.name)
    shards = []
    for ds_path, sa_path in zip(ds_paths, sa_paths, strict=True):
        tokens = np.memmap(ds_path, dtype=f"<u{width}", mode="r")
        table = np.memmap(sa_path, dtype=np.uint8, mode="r")
        shards.append(_Shard(tokens, table, len(table) // len(tokens), to_model))
    return shards


def _shard_continuations(shard: _Shard, lo: int, hi: int, offset: int, m: int) -> np.ndarray:
    """Model ids at positions offset..offset+m-1 after the suffixes of ranks lo..hi-1."""
    raw = np.asarray(shard.table[lo * shard.ptr_bytes : hi * shard.ptr_bytes])
    raw = raw.reshape(hi - lo, shard.ptr_bytes).astype(np.uint64)  # (n, ptr_bytes)
    shifts = np.arange(shard.ptr_bytes, dtype=np.uint64) * np.uint64(8)
    byte_ptr = (raw << shifts).sum(axis=1)  # (n,) little-endian
    start = byte_ptr // np.uint64(shard.tokens.itemsize) + np.uint64(offset)
    pos = start[:, None].astype(np.int64) + np.arange(m)  # (n, m)
    inside = pos < len(shard.tokens)
    conts = np.asarray(shard.tokens[np.where(inside, pos, 0)]).astype(np.int64)  # (n, m)
    separator = np.iinfo(shard.tokens.dtype).max
    ended = np.logical_or.accumulate(~inside | (conts == separator), axis=1)
    if shard.to_model is not None:
        conts = shard.to_model[conts]  # compact -> model ids
    return np.where(ended, -1, conts)


# ---------------------------------------------------------------- prompt lookup


class PromptLookupDrafter:
    """Copy what followed the latest earlier occurrence of the context's last n-gram.

    Tries n-gram sizes from `max_ngram` down to `min_ngram` and drafts the tokens that
    followed the most recent earlier occurrence (prompt lookup decoding).
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context: list[int], k: int) -> Draft:
        """Draft up to k tokens copied from the context itself."""
        ctx = np.asarray([int(t) for t in context], dtype=np.int64)
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            starts = _ngram_starts(ctx, n)  # earlier occurrences with a continuation
            if len(starts):
                begin = int(starts[-1]) + n
                tokens = ctx[begin : begin + k].tolist()
                return Draft(tokens, one_hot(tokens), n, len(starts))
        return Draft([], [], 0, 0)


def _ngram_starts(ctx: np.ndarray, n: int) -> np.ndarray:
    """Start positions i < len-n where ctx[i:i+n] equals the last n tokens."""
    if n <= 0 or len(ctx) <= n:
        return np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)  # (len-n, n)
    return np.flatnonzero((windows == ctx[-n:]).all(axis=1))


# ---------------------------------------------------------------- draft model


class DraftModelDrafter:
    """A small causal LM that drafts token by token with its own KV cache.

    The cache is reused across calls: only the part of the new context that differs from
    what the cache already holds is fed. Greedy drafts report one-hot q; sampled drafts
    (`sample=True`, at `temperature`) report the softmax they were drawn from.
    `q_format` is "tensor" for a (k, V) tensor or "dict" for sparse dicts.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        q_format: str = "tensor",
    ) -> None:
        self.model = model.eval()
        self.sample = sample
        self.temperature = temperature
        self.generator = torch.Generator().manual_seed(seed)
        self.q_format = q_format
        self.cache: Any = None
        self.cached: list[int] = []  # tokens whose keys/values are in `cache`

    @torch.inference_mode()
    def propose(self, context: list[int], k: int) -> Draft:
        """Draft k tokens after `context`."""
        ctx = [int(t) for t in context]
        logits = self._sync(ctx)  # (V,) next-token logits after ctx
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            token, probs = self._choose(logits)
            tokens.append(token)
            rows.append(probs)
            if i + 1 < k:
                logits = self._feed([token])
        q = torch.stack(rows) if rows else torch.zeros(0, 0)  # (k, V)
        return Draft(tokens, q if self.q_format == "tensor" else _rows_to_dicts(q), 0, 0)

    def _sync(self, ctx: list[int]) -> torch.Tensor:
        """Make the cache hold ctx[:-1] plus the fed tail; return logits after ctx."""
        from transformers import DynamicCache

        keep = min(_common_prefix(self.cached, ctx), len(ctx) - 1)
        if keep == 0 or self.cache is None:
            self.cache, self.cached = DynamicCache(), []
        else:
            crop_to(self.cache, keep)
            self.cached = self.cached[:keep]
        return self._feed(ctx[keep:])

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=self.model.device)  # (1, T)
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.cached.extend(tokens)
        return out.logits[0, -1].cpu()  # (V,)

    def _choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        if not self.sample:
            token = int(torch.argmax(logits))
            probs = torch.zeros(logits.shape[-1], dtype=torch.float64)
            probs[token] = 1.0
            return token, probs
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)  # (V,)
        return int(torch.multinomial(probs, 1, generator=self.generator)), probs


def crop_to(cache: Any, length: int) -> None:
    """Shrink a DynamicCache to its first `length` positions.

    transformers 5 `crop(n)` takes the number of positions to drop as a negative integer.
    """
    drop = cache.get_seq_length() - length
    if drop < 0:
        raise ValueError(f"cannot grow a cache of {cache.get_seq_length()} to {length}")
    if drop:
        cache.crop(-drop)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _rows_to_dicts(q: torch.Tensor) -> list[Dist]:
    """Sparse dicts (nonzero entries) of the rows of a (k, V) probability tensor."""
    dicts = []
    for row in q:
        ids = torch.nonzero(row).flatten().tolist()
        dicts.append({int(t): float(row[t]) for t in ids})
    return dicts
