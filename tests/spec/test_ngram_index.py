"""Building and opening infini-gram indexes from pre-tokenized documents."""

from __future__ import annotations

import numpy as np
import pytest

from kvspec.spec import ngram_index
from kvspec.spec.ngram_index import InfiniGramError, build_index, open_engine, token_dtype_for

VOCAB = 8
EOS = 7


def _random_docs(seed: int, n_docs: int = 30, vocab: int = 6) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, rng.integers(1, 30)).tolist() for _ in range(n_docs)]


def _brute_count(docs: list[list[int]], query: list[int]) -> int:
    n = len(query)
    return sum(doc[i : i + n] == query for doc in docs for i in range(len(doc) - n + 1))


def test_build_writes_index_and_stats(tmp_path):
    docs = _random_docs(0)
    stats = build_index(docs, tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    assert stats["n_docs"] == len(docs)
    assert stats["n_tokens"] == sum(map(len, docs))
    assert stats["token_dtype"] == "u16"
    assert stats["index_bytes"] > 0 and stats["bytes_per_token"] > 0
    assert {p.name for p in (tmp_path / "idx").iterdir()} == {"tokenized", "offset", "table"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_engine_counts_match_brute_force(tmp_path):
    docs = _random_docs(1)
    build_index(docs, tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    engine = open_engine(tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    rng = np.random.default_rng(2)
    for _ in range(30):
        query = rng.integers(0, 6, rng.integers(1, 4)).tolist()
        assert engine.count(query)["count"] == _brute_count(docs, query)
    assert engine.get_total_doc_cnt() == len(docs) + 1  # plus the closing empty document


def test_rebuild_replaces_previous_index(tmp_path):
    build_index([[1, 2, 3]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    build_index([[4, 5], [4, 5]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    engine = open_engine(tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    assert engine.count([4, 5])["count"] == 2
    assert engine.count([1, 2])["count"] == 0


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        ([], "empty corpus"),
        ([[], []], "empty corpus"),
        ([[1, 2], [3, VOCAB]], "token id 8 >= vocab_size 8"),
        ([[1, -1]], "negative token id -1"),
        ([[1, 2.5]], "not an integer"),
        ([[1, "a"]], "not an integer"),
        (["abc"], "expected token ids"),
    ],
)
def test_bad_corpus_fails_clearly(tmp_path, docs, message):
    with pytest.raises(ValueError, match=message):
        build_index(docs, tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    assert not (tmp_path / "idx").exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_corpus_keeps_existing_index(tmp_path):
    build_index([[1, 2, 3]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    with pytest.raises(ValueError):
        build_index([[1, 99]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    engine = open_engine(tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    assert engine.count([1, 2])["count"] == 1


def test_indexer_failure_raises_runtime_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ngram_index.sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="indexer failed"):
        build_index([[1, 2, 3]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    assert not (tmp_path / "idx").exists()


def test_engine_errors_become_exceptions(tmp_path):
    build_index([[1, 2, 3]], tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    engine = open_engine(tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
    with pytest.raises(InfiniGramError, match="input_ids"):
        engine.find([-1])
    assert engine.find(np.array([1, 2]))["cnt"] == 1  # numpy ids are converted


def test_open_missing_index(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_engine(tmp_path / "nothing", vocab_size=VOCAB, eos_token_id=EOS)


def test_token_dtype_choice():
    assert token_dtype_for(50_000) == "u16"
    assert token_dtype_for(65_534) == "u16"
    assert token_dtype_for(65_535) == "u32"
    assert token_dtype_for(128_256) == "u32"
