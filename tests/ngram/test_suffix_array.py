"""In-process suffix-array search: the same ranges as the engine's `find`."""

from __future__ import annotations

import numpy as np
import pytest

from kvspec.ngram import suffix_array as sa
from kvspec.ngram.index import build_index, open_engine

from .sparse_vocab import build_twin, contexts


def _engine(tmp_path, docs, vocab_size, eos):
    build_index(docs, tmp_path / "idx", vocab_size=vocab_size, eos_token_id=eos)
    return open_engine(tmp_path / "idx", vocab_size, eos, max_support=1000)


def _queries(rng, vocab: int, docs: list[list[int]], n: int) -> list[list[int]]:
    """Random queries and real substrings (which match), empty one included."""
    out: list[list[int]] = [[]]
    for _ in range(n):
        if rng.random() < 0.5:
            out.append(rng.integers(0, vocab, rng.integers(1, 6)).tolist())
        else:
            doc = docs[int(rng.integers(len(docs)))]
            i = int(rng.integers(len(doc)))
            out.append(doc[i : i + int(rng.integers(1, 12))])
    return out


@pytest.mark.parametrize(("vocab", "wide_ids"), [(5, False), (300, False), (300, True)])
def test_find_equals_engine(tmp_path, vocab, wide_ids):
    """Small and two-byte ids (byte order differs from id order); a five-token vocabulary
    makes ranges of thousands of ranks for the binary searches."""
    rng = np.random.default_rng(vocab)
    offset = 250 if wide_ids else 0  # ids 250..549 straddle the 256 byte boundary
    docs = [(rng.integers(0, vocab, rng.integers(1, 60)) + offset).tolist() for _ in range(200)]
    size = vocab + offset + 1
    engine = _engine(tmp_path, docs, size, size - 1)
    index = sa.open_index(engine.index_dir, engine.token_dtype)
    matched = 0
    for query in _queries(rng, vocab, [[t - offset for t in d] for d in docs], 300):
        query = [t + offset for t in query]
        want = engine.find(query)
        got = sa.find(index, query)
        assert got == [tuple(s) for s in want["segment_by_shard"]], query
        assert sa.count(got) == want["cnt"]
        matched += want["cnt"] > 0 and len(query) > 1
    assert matched > 50


def test_extend_equals_find_of_the_longer_query(tmp_path):
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 4, 30).tolist() for _ in range(100)]
    engine = _engine(tmp_path, docs, 5, 4)
    index = sa.open_index(engine.index_dir, engine.token_dtype)
    for _ in range(100):
        query = rng.integers(0, 4, rng.integers(0, 8)).tolist()
        tail = rng.integers(0, 4, rng.integers(0, 4)).tolist()
        assert sa.extend(index, sa.find(index, query), len(query), tail) == sa.find(
            index, query + tail
        )


def test_find_on_compact_vocabulary_index(tmp_path):
    """A compact index is searched in its own ids; the drafter translates model ids."""
    twin = build_twin(tmp_path, 21, eos_in_corpus=True)
    index = sa.open_index(twin.compact.index_dir, twin.compact.token_dtype)
    for ctx in contexts(twin, 22, 60):
        query = twin.compact.vocab.to_compact(ctx[-3:])
        want = twin.compact.raw.find(query)
        assert sa.find(index, query) == [tuple(s) for s in want["segment_by_shard"]]


@pytest.mark.parametrize("below", [None, 1, 3, 6])
def test_longest_suffix_is_the_longest_that_the_engine_finds(tmp_path, below):
    """Doubling then bisecting finds the longest matching suffix shorter than `below`, as a
    scan of every length with the engine's `find` does."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 6, rng.integers(5, 40)).tolist() for _ in range(60)]
    engine = _engine(tmp_path, docs, 7, 6)
    index = sa.open_index(engine.index_dir, engine.token_dtype)
    lengths = set()
    for ctx in _queries(rng, 6, docs, 200):
        limit = len(ctx) if below is None else min(below - 1, len(ctx))
        want = max(n for n in range(limit + 1) if engine.find(ctx[len(ctx) - n :])["cnt"] > 0)
        n, segments = index.longest_suffix(ctx, -1 if below is None else below)
        assert n == want, ctx
        want_segments = engine.find(ctx[len(ctx) - n :])["segment_by_shard"]
        assert segments == [tuple(s) for s in want_segments]
        lengths.add(n)
    # every length up to the cap (or at least four lengths) was exercised
    assert len(lengths) >= (4 if below is None else min(4, below))
