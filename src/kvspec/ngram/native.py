"""The n-gram drafters' searches, compiled (`kernels/ngram_search.cpp`; built on first use in
a few seconds, then loaded from PyTorch's extensions cache).

- `Index(shards, lut)`: an infini-gram index's memory-mapped shards: `find`, `extend` and
  `longest_suffix` give per-shard rank ranges; `rows(segments, depth, m, ranks=None)` the m ids
  after each match (model ids through `lut`, -1 from a document end on) as a `Rows` object,
  whose `column(j, eos)`, `keep(j, token)`, `row(i, from)` and `array()` a drafter walks.
- `earlier_matches(ctx, max_match)` and `suffix_draft(ctx, max_match, min_match, k)`: the
  request-local searches of `kvspec.ngram.local_tree` and `RequestSuffixDrafter`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kvspec.extensions import load_extension

SOURCE = Path(__file__).parent / "kernels" / "ngram_search.cpp"
FLAGS = ["-O2"]


@cache
def native() -> Any:
    """The compiled module (no CPU-specific flags: one build serves every x86 node)."""
    return load_extension("kvspec_ngram_search", SOURCE, FLAGS)
