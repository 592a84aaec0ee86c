"""The n-gram drafters' compiled searches: built here, and reading index files in place (the
searches themselves are checked against Python references in test_suffix_array.py,
test_drafters.py and test_local_tree.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvspec.ngram import native
from kvspec.ngram.suffix_array import open_index


def test_request_local_search_answers() -> None:
    ctx = [1, 2, 3, 1, 2, 3, 1, 2]
    assert native.native().earlier_matches(ctx, 32) == (5, [4])
    assert native.native().earlier_matches(ctx, 2) == (2, [1, 4])


def test_index_reads_read_only_maps_in_place(tmp_path: Path) -> None:
    """A read-only memory map is read in place, not copied into the kernel: a later write to
    the file is what the index reads (an index of millions of tokens is never duplicated)."""
    index_dir = tmp_path / "idx"
    index_dir.mkdir()
    tokens = np.array([0xFFFF, 5, 6, 0xFFFF, 7], dtype="<u2")  # two documents
    tokens.tofile(index_dir / "tokenized.0")
    np.array([2, 8, 4, 0, 6], dtype=np.uint8).tofile(index_dir / "table.0")  # byte offsets
    index = open_index(index_dir, "u16")
    assert index.rows([(0, 1)], 0, 2).array().tolist() == [[5, 6]]
    writer = np.memmap(index_dir / "tokenized.0", dtype="<u2", mode="r+")
    writer[1] = 9
    writer.flush()
    assert index.rows([(0, 1)], 0, 2).array().tolist() == [[9, 6]]
    assert index.rows([(1, 2)], 0, 2).array().tolist() == [[7, -1]]  # the stream ends
