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


@pytest.mark.parametrize("small_gather", [False, True])
@pytest.mark.parametrize(("vocab", "wide_ids"), [(5, False), (300, False), (300, True)])
def test_find_equals_engine(tmp_path, monkeypatch, small_gather, vocab, wide_ids):
    """Small and two-byte ids (byte order differs from id order), gathered and k-ary search."""
    if small_gather:  # force the k-ary search on ranges the tests can afford
        monkeypatch.setattr(sa, "_GATHER", 8)
        monkeypatch.setattr(sa, "_FANOUT", 4)
    rng = np.random.default_rng(vocab)
    offset = 250 if wide_ids else 0  # ids 250..549 straddle the 256 byte boundary
    docs = [(rng.integers(0, vocab, rng.integers(1, 60)) + offset).tolist() for _ in range(200)]
    size = vocab + offset + 1
    engine = _engine(tmp_path, docs, size, size - 1)
    shards = sa.open_shards(engine.index_dir, engine.token_dtype)
    matched = 0
    for query in _queries(rng, vocab, [[t - offset for t in d] for d in docs], 300):
        query = [t + offset for t in query]
        want = engine.find(query)
        got = sa.find(shards, query)
        assert got == [tuple(s) for s in want["segment_by_shard"]], query
        assert sa.count(got) == want["cnt"]
        matched += want["cnt"] > 0 and len(query) > 1
    assert matched > 50


def test_extend_equals_find_of_the_longer_query(tmp_path):
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 4, 30).tolist() for _ in range(100)]
    engine = _engine(tmp_path, docs, 5, 4)
    shards = sa.open_shards(engine.index_dir, engine.token_dtype)
    for _ in range(100):
        query = rng.integers(0, 4, rng.integers(0, 8)).tolist()
        tail = rng.integers(0, 4, rng.integers(0, 4)).tolist()
        assert sa.extend(shards, sa.find(shards, query), len(query), tail) == sa.find(
            shards, query + tail
        )


def test_find_on_compact_vocabulary_index(tmp_path):
    """A compact index is searched in its own ids; the drafter translates model ids."""
    twin = build_twin(tmp_path, 21, eos_in_corpus=True)
    shards = sa.open_shards(twin.compact.index_dir, twin.compact.token_dtype)
    for ctx in contexts(twin, 22, 60):
        query = twin.compact.vocab.to_compact(ctx[-3:])
        want = twin.compact.raw.find(query)
        assert sa.find(shards, query) == [tuple(s) for s in want["segment_by_shard"]]
