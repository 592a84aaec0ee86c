"""In-process search of an infini-gram index's suffix arrays, without the engine's threads.

The engine's `find` starts two threads per call (~0.3 ms here); a draft that needs several
lookups per step spends most of its time there. This module memory-maps the same files
(`tokenized.*`, `table.*`) and searches them with the compiled `kvspec.ngram.native.Index`:

- the indexer sorts suffixes by their raw bytes, and token ids are stored little-endian, so
  the sort key of a token is its byte-swapped value; a document separator (all bits set)
  sorts last, a suffix that runs off the end of the stream sorts first;
- narrowing a range to the suffixes with `token` at `depth` is two binary searches: a range
  whose suffixes share their first `depth` tokens is sorted by the token at `depth`.

Ranges equal the engine's `find` (tested). Ids are the index's own (compact ids for a
compact-vocabulary index); `kvspec.decoding.drafts` translates. `rows` reads continuations
as model ids through the compact vocabulary's map (`lut`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvspec.ngram.native import native

Segments = list[tuple[int, int]]  # per shard, [lo, hi) ranks


def open_index(index_dir: str | Path, token_dtype: str, lut: np.ndarray | None = None) -> Any:
    """Every shard of an index, paired the way the engine pairs them (sorted names), as one
    compiled `Index`; `lut` maps compact ids to model ids in the continuations it reads."""
    width = 2 if token_dtype == "u16" else 4
    names = sorted(p for p in Path(index_dir).iterdir())
    ds_paths = [p for p in names if "tokenized" in p.name]
    sa_paths = [p for p in names if "table" in p.name]
    shards = [
        (_bytes(ds_path), width, _bytes(sa_path))
        for ds_path, sa_path in zip(ds_paths, sa_paths, strict=True)
    ]
    return native().Index(shards, None if lut is None else np.ascontiguousarray(lut, np.int64))


def _bytes(path: Path) -> np.ndarray:
    """A read-only map of a file's bytes (a plain ndarray view: no copy reaches the kernel)."""
    return np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)


def find(index: Any, query: Sequence[int]) -> Segments:
    """Per-shard rank ranges of the suffixes that start with `query` (index ids)."""
    return index.find([int(t) for t in query])


def extend(index: Any, segments: Segments, depth: int, tail: Sequence[int]) -> Segments:
    """Ranges of `query + tail` from the ranges of a `query` of length `depth`."""
    return index.extend(segments, depth, [int(t) for t in tail])


def count(segments: Segments) -> int:
    """Number of matches in all shards."""
    return sum(hi - lo for lo, hi in segments)
