"""In-process search of an infini-gram index's suffix arrays, without the engine's threads.

The engine's `find` starts two threads per call (~0.3 ms here); a draft that needs several
lookups per step spends most of its time there. This module reads the same memory-mapped
files (`tokenized.*`, `table.*`) and finds suffix-array ranges with numpy:

- the indexer sorts suffixes by their raw bytes, and token ids are stored little-endian, so
  the sort key of a token is its byte-swapped value (`_key`); a document separator (all
  bits set) sorts last, a suffix that runs off the end of the stream sorts first;
- `narrow(range, depth, token)` keeps the ranks whose token at `depth` equals `token`:
  a range whose suffixes share their first `depth` tokens is sorted by the token at
  `depth`, so two bounds found by k-ary search (`_FANOUT` evenly spaced probes per round,
  gathered at once) delimit it;
- narrowed ranges are remembered (up to `_CACHED` per shard), so a lookup pays for the whole
  array at most once per first token, and the short suffixes that successive drafts search
  again cost a dictionary lookup.

Ranges equal the engine's `find` (tested). Ids are the index's own (compact ids for a
compact-vocabulary index); `kvspec.decoding.drafts` translates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_FANOUT = 64  # probes per k-ary search round
_GATHER = 4096  # ranges at most this long are narrowed with one vectorised gather
_CACHED = 1 << 16  # narrowed ranges remembered per shard (then forgotten all at once)


@dataclass
class Shard:
    """Memory maps of one index shard and its cache of one-token ranges."""

    tokens: np.ndarray  # (n_tok,) u16/u32, separators included
    table: np.ndarray  # (n_tok * ptr_bytes,) u8, little-endian byte pointers into `tokens`
    ptr_bytes: int
    ranges: dict[tuple[int, int, int, int], tuple[int, int]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of suffixes (ranks)."""
        return len(self.table) // self.ptr_bytes

    def positions(self, ranks: np.ndarray) -> np.ndarray:
        """Token positions of the suffixes at `ranks`.  # (n,) int64"""
        ranks = np.asarray(ranks, dtype=np.int64)
        offsets = ranks[:, None] * self.ptr_bytes + np.arange(self.ptr_bytes)  # (n, ptr_bytes)
        raw = np.asarray(self.table[offsets]).astype(np.uint64)
        shifts = np.arange(self.ptr_bytes, dtype=np.uint64) * np.uint64(8)
        byte_ptr = (raw << shifts).sum(axis=1)  # (n,) little-endian
        return (byte_ptr // np.uint64(self.tokens.itemsize)).astype(np.int64)

    def range_positions(self, lo: int, hi: int) -> np.ndarray:
        """Token positions of ranks lo..hi-1.  # (hi-lo,) int64"""
        raw = np.asarray(self.table[lo * self.ptr_bytes : hi * self.ptr_bytes])
        raw = raw.reshape(hi - lo, self.ptr_bytes).astype(np.uint64)
        shifts = np.arange(self.ptr_bytes, dtype=np.uint64) * np.uint64(8)
        return ((raw << shifts).sum(axis=1) // np.uint64(self.tokens.itemsize)).astype(np.int64)

    def keys_at(self, positions: np.ndarray, depth: int) -> np.ndarray:
        """Sort keys of the tokens `depth` after `positions` (-1 past the end).  # (n,) int64"""
        pos = positions + depth
        inside = pos < len(self.tokens)
        tokens = np.asarray(self.tokens[np.where(inside, pos, 0)]).astype(np.int64)
        return np.where(inside, _key(tokens, self.tokens.itemsize), -1)

    def narrow(self, lo: int, hi: int, depth: int, token: int) -> tuple[int, int]:
        """The sub-range of [lo, hi) whose suffixes have `token` at `depth`.

        Every suffix in [lo, hi) must share its first `depth` tokens (a `find` range).
        """
        if hi <= lo:
            return lo, lo
        cached = self.ranges.get((lo, hi, depth, token))
        if cached is not None:
            return cached
        key = int(_key(np.int64(token), self.tokens.itemsize))
        if hi - lo <= _GATHER:
            keys = self.keys_at(self.range_positions(lo, hi), depth)  # (hi-lo,) sorted
            found = (
                lo + int(np.searchsorted(keys, key, "left")),
                lo + int(np.searchsorted(keys, key, "right")),
            )
        else:
            found = (
                self._bound(lo, hi, depth, key, "left"),
                self._bound(lo, hi, depth, key, "right"),
            )
        if len(self.ranges) >= _CACHED:
            self.ranges.clear()
        self.ranges[(lo, hi, depth, token)] = found
        return found

    def _bound(self, lo: int, hi: int, depth: int, key: int, side: str) -> int:
        """First rank in [lo, hi) whose key at `depth` is >= key ("left") or > key ("right")."""
        while hi - lo > _GATHER:
            probes = np.linspace(lo, hi - 1, _FANOUT).astype(np.int64)  # (FANOUT,)
            keys = self.keys_at(self.positions(probes), depth)
            i = int(np.searchsorted(keys, key, side))
            lo, hi = (
                (lo if i == 0 else int(probes[i - 1]) + 1),
                (hi if i == len(probes) else int(probes[i]) + 1),
            )
        keys = self.keys_at(self.range_positions(lo, hi), depth)
        return lo + int(np.searchsorted(keys, key, side))


def _key(tokens: np.ndarray | np.int64, itemsize: int) -> np.ndarray:
    """Byte-order sort key of token ids stored little-endian: the byte-swapped value."""
    t = np.asarray(tokens, dtype=np.int64)
    if itemsize == 2:
        return ((t & 0xFF) << 8) | (t >> 8)
    return ((t & 0xFF) << 24) | (((t >> 8) & 0xFF) << 16) | (((t >> 16) & 0xFF) << 8) | (t >> 24)


def open_shards(index_dir: str | Path, token_dtype: str) -> list[Shard]:
    """Memory-map every shard of an index the way the engine pairs them (sorted names)."""
    width = 2 if token_dtype == "u16" else 4
    names = sorted(p for p in Path(index_dir).iterdir())
    ds_paths = [p for p in names if "tokenized" in p.name]
    sa_paths = [p for p in names if "table" in p.name]
    shards = []
    for ds_path, sa_path in zip(ds_paths, sa_paths, strict=True):
        # plain ndarray views of the maps: indexing them skips np.memmap's per-result wrapping
        tokens = np.memmap(ds_path, dtype=f"<u{width}", mode="r").view(np.ndarray)
        table = np.memmap(sa_path, dtype=np.uint8, mode="r").view(np.ndarray)
        shards.append(Shard(tokens, table, len(table) // len(tokens)))
    return shards


Segments = list[tuple[int, int]]  # per shard, [lo, hi) ranks


def find(shards: Sequence[Shard], query: Sequence[int]) -> Segments:
    """Per-shard rank ranges of the suffixes that start with `query` (index ids)."""
    return [_find_one(shard, query) for shard in shards]


def extend(
    shards: Sequence[Shard], segments: Segments, depth: int, tail: Sequence[int]
) -> Segments:
    """Ranges of `query + tail` from the ranges of a `query` of length `depth`."""
    out = []
    for shard, (lo, hi) in zip(shards, segments, strict=True):
        for i, token in enumerate(tail):
            if hi <= lo:
                break
            lo, hi = shard.narrow(lo, hi, depth + i, int(token))
        out.append((lo, hi))
    return out


def count(segments: Segments) -> int:
    """Number of matches in all shards."""
    return sum(hi - lo for lo, hi in segments)


def _find_one(shard: Shard, query: Sequence[int]) -> tuple[int, int]:
    lo, hi = 0, shard.size
    for depth, token in enumerate(query):
        lo, hi = shard.narrow(lo, hi, depth, int(token))
        if hi <= lo:
            return lo, lo
    return lo, hi
