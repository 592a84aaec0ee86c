"""Building and opening infini-gram indexes from pre-tokenized documents."""

from __future__ import annotations

import numpy as np
import pytest

from kvspec.ngram import index as ngram_index
from kvspec.ngram.compact_vocab import MAX_COMPACT_IDS
from kvspec.ngram.index import (
    InfiniGramError,
    OvercommitError,
    build_index,
    open_engine,
    token_dtype_for,
)

from .sparse_vocab import LARGE_VOCAB, build_twin, contexts, sparse_docs

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
    assert not stats["compact_vocab"]
    assert stats["distinct_tokens"] == len({t for d in docs for t in d})
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


# ------------------------------------------------------------------- compact vocabularies


def test_compact_index_stats_and_files(tmp_path):
    docs, _, eos = sparse_docs(0)
    stats = build_index(docs, tmp_path / "idx", vocab_size=LARGE_VOCAB, eos_token_id=eos)
    distinct = sorted({t for d in docs for t in d})
    assert stats["token_dtype"] == "u16" and stats["compact_vocab"]
    assert stats["distinct_tokens"] == len(distinct)
    files = {p.name for p in (tmp_path / "idx").iterdir()}
    assert files == {"tokenized", "offset", "table", "vocab_map.npy"}
    assert np.load(tmp_path / "idx" / "vocab_map.npy").tolist() == distinct
    # Exactly the ordinary u16 index of the corpus relabelled by rank among its ids.
    ranked = [np.searchsorted(distinct, d).tolist() for d in docs]
    build_index(ranked, tmp_path / "ranked", len(distinct), 0)
    for name in ("tokenized", "offset", "table"):
        assert (tmp_path / "idx" / name).read_bytes() == (tmp_path / "ranked" / name).read_bytes()


def _same_answer(twin, ref_answer, answer):
    """Counts, lengths and (mapped-back) distributions agree, keys in the same order."""
    if "result_by_token_id" in ref_answer:
        want = twin.dist_to_model(ref_answer["result_by_token_id"])
        assert list(answer["result_by_token_id"].items()) == list(want.items())
    rest = {k: v for k, v in ref_answer.items() if k != "result_by_token_id"}
    assert {k: answer[k] for k in rest} == rest


@pytest.mark.parametrize(("eos_in_corpus", "max_support"), [(True, 1000), (False, 1000), (True, 8)])
def test_compact_engine_equals_relabelled_reference(tmp_path, eos_in_corpus, max_support):
    twin = build_twin(tmp_path, 1, eos_in_corpus, max_support)
    ended = 0
    for ctx in contexts(twin, 2, 100):
        ref = twin.to_ref(ctx)
        assert twin.compact.count(ctx) == twin.reference.count(ref)
        assert twin.compact.find(ctx)["cnt"] == twin.reference.find(ref)["cnt"]
        for call in ("ntd", "infgram_ntd"):
            answer = getattr(twin.compact, call)(ctx)
            _same_answer(twin, getattr(twin.reference, call)(ref), answer)
            ended += twin.eos in answer["result_by_token_id"]
        for cont in (ctx[-1:] or [twin.eos]) + twin.unseen[:1]:
            for call in ("prob", "infgram_prob"):
                want = getattr(twin.reference, call)(ref, twin.to_ref([cont])[0])
                assert getattr(twin.compact, call)(ctx, cont) == want
    assert ended  # document ends came back as the model's eos


def test_compact_documents_come_back_in_model_ids(tmp_path):
    twin = build_twin(tmp_path, 3, eos_in_corpus=False)
    for i, doc in enumerate(twin.docs[:20]):
        assert twin.compact.get_doc_by_ix(doc_ix=i, max_disp_len=100)["token_ids"] == doc
    found = twin.compact.search_docs(twin.docs[0][:2], maxnum=3)
    assert all(d["token_ids"] in twin.docs for d in found["documents"])


def test_unseen_ids_never_match(tmp_path):
    twin = build_twin(tmp_path, 4, eos_in_corpus=False)
    engine, seen = twin.compact, twin.docs[0][:2]
    for unseen in twin.unseen[:5] + [twin.eos]:
        assert engine.find([unseen])["cnt"] == 0
        assert engine.count(seen + [unseen])["count"] == 0
        assert engine.ntd([unseen]) == {"prompt_cnt": 0, "result_by_token_id": {}, "approx": False}
        backoff = engine.infgram_ntd(seen + [unseen])
        assert backoff["suffix_len"] == 0 and backoff == engine.infgram_ntd([])
    assert engine.count([twin.unseen[0], *seen])["count"] == 0


def test_compact_engine_rejects_bad_ids_and_untranslated_calls(tmp_path):
    twin = build_twin(tmp_path, 5)
    with pytest.raises(InfiniGramError, match="outside"):
        twin.compact.find([LARGE_VOCAB])
    with pytest.raises(InfiniGramError, match="outside"):
        twin.compact.ntd([-1])
    assert twin.compact.find(np.array(twin.docs[0][:1]))["cnt"] > 0  # numpy ids still work
    with pytest.raises(AttributeError, match="not translated"):
        twin.compact.compute_unigram_counts(0)


def test_compact_vocabulary_at_its_limit(tmp_path):
    ids = list(range(0, 4 * MAX_COMPACT_IDS, 4))  # the most distinct ids a u16 index holds
    eos = 1  # absent: shares the unseen id, the last one the engine accepts
    stats = build_index([ids], tmp_path / "idx", vocab_size=LARGE_VOCAB, eos_token_id=eos)
    assert stats["compact_vocab"] and stats["distinct_tokens"] == MAX_COMPACT_IDS
    engine = open_engine(tmp_path / "idx", LARGE_VOCAB, eos)
    assert engine.vocab.engine_vocab_size == 0xFFFF - 1  # unseen id 65,533 + 1
    assert engine.count(ids[-3:])["count"] == 1
    assert engine.count([ids[-1], 3])["count"] == 0
    assert engine.ntd(ids[-2:-1])["result_by_token_id"].keys() == {ids[-1]}
    assert engine.ntd(ids[-1:])["result_by_token_id"].keys() == {eos}  # the document's end


def _too_many_ids(n_docs: int = 1) -> list[list[int]]:
    return [list(range(MAX_COMPACT_IDS + 1))] * n_docs


def _fake_proc(tmp_path, monkeypatch, mode: str | None, ram_gib: int, swap_gib: int = 0):
    setting = tmp_path / "overcommit_memory"
    if mode is not None:
        setting.write_text(f"{mode}\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        f"MemTotal:       {ram_gib * 2**20} kB\nMemFree:  1 kB\nSwapTotal: {swap_gib * 2**20} kB\n"
    )
    monkeypatch.setattr(ngram_index, "OVERCOMMIT_SETTING", setting)
    monkeypatch.setattr(ngram_index, "MEMINFO", meminfo)


class _IndexerReached(Exception):
    pass


def _record_indexer(monkeypatch) -> list[str]:
    widths: list[str] = []

    def fake(index_dir, work, dtype, cpus, mem_gb):
        widths.append(dtype)
        raise _IndexerReached

    monkeypatch.setattr(ngram_index, "_run_indexer", fake)
    return widths


@pytest.mark.parametrize(("mode", "ram_gib"), [("0", 24), ("2", 24), ("2", 512)])
def test_u32_build_stops_with_instructions_without_overcommit(tmp_path, monkeypatch, mode, ram_gib):
    _fake_proc(tmp_path, monkeypatch, mode, ram_gib)
    widths = _record_indexer(monkeypatch)
    with pytest.raises(OvercommitError) as err:
        build_index(_too_many_ids(), tmp_path / "idx", vocab_size=LARGE_VOCAB, eos_token_id=0)
    message = str(err.value)
    assert "sysctl vm.overcommit_memory=1" in message
    assert f"vm.overcommit_memory is {mode}" in message and "32 GiB" in message
    assert f"{MAX_COMPACT_IDS + 1:,} distinct token ids" in message
    assert "does not change kernel settings" in message
    assert widths == [] and not (tmp_path / "idx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


@pytest.mark.parametrize(
    ("mode", "ram_gib", "swap_gib"), [("1", 1, 0), ("0", 24, 16), (None, 1, 0)]
)
def test_u32_build_proceeds_when_the_kernel_allows_it(
    tmp_path, monkeypatch, mode, ram_gib, swap_gib
):
    _fake_proc(tmp_path, monkeypatch, mode, ram_gib, swap_gib)
    widths = _record_indexer(monkeypatch)
    with pytest.raises(_IndexerReached):
        build_index(_too_many_ids(), tmp_path / "idx", vocab_size=LARGE_VOCAB, eos_token_id=0)
    assert widths == ["u32"]
