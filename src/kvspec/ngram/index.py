"""Build and open infini-gram suffix-array indexes from already tokenized documents.

The indexer's own `--tokenizer` option fetches tokenizers from the hub, so we write its
pre-tokenized input files ourselves and let it build only the suffix array. The result is a
directory the `InfiniGramEngine` can serve (files `tokenized`, `offset`, `table`, and
`vocab_map.npy` for an index over a compact vocabulary: see `kvspec.ngram.compact_vocab`).
"""

from __future__ import annotations

import inspect
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvspec.ngram.compact_vocab import (
    MAX_COMPACT_IDS,
    VocabMap,
    compact_files,
    distinct_ids,
    fits_compact,
    load_vocab_map,
)

# The indexer splits the corpus into parts that overlap by this many bytes; parts smaller than
# the overlap produce a corrupt table, so small corpora are built with one worker.
_INDEXER_HACK_BYTES = 100_000
_STDERR_TAIL_CHARS = 2000
# A u32 build reserves this much memory at once (seen: "memory allocation of 34359738368
# bytes failed"); Linux grants it with overcommit always on (1), or under the default
# heuristic (0) only when RAM + swap exceed it.
U32_INDEXER_BYTES = 2**32 * 8
OVERCOMMIT_SETTING = Path("/proc/sys/vm/overcommit_memory")
MEMINFO = Path("/proc/meminfo")


def token_dtype_for(vocab_size: int) -> str:
    """The indexer's token width: "u16" if ids and the separator fit in 16 bits, else "u32"."""
    return "u16" if vocab_size < 0xFFFF else "u32"


def build_index(
    docs: Iterable[Sequence[int]],
    save_dir: str | os.PathLike[str],
    vocab_size: int,
    eos_token_id: int,
    cpus: int = 2,
    mem_gb: int = 8,
) -> dict[str, Any]:
    """Build an infini-gram index of `docs` (lists of token ids) in `save_dir`; return build stats.

    Each document is written as the separator (all bits set) followed by its ids in little
    endian, then one empty document closes the stream; `offset` holds each document's
    starting byte. The suffix array is built by
    `python -m infini_gram.indexing_v6` in a temporary sibling directory that replaces
    `save_dir` only on success, so a crash never leaves a plausible but broken index.

    Token width is u16 when `vocab_size < 65535`. A larger vocabulary is indexed as u16
    too, over a compact vocabulary (`vocab_map.npy`, read back by `open_engine`), when the
    corpus uses at most 65,533 distinct ids; only beyond that is it a u32 index, whose
    build needs memory overcommit and stops first with instructions if the kernel forbids
    it (`check_overcommit`).

    Stats: n_docs, n_tokens, build_seconds, index_bytes, bytes_per_token, token_dtype,
    compact_vocab, distinct_tokens.

    Raises ValueError for an empty corpus or an id that is negative, not an integer, or not
    below `vocab_size`; OvercommitError before a u32 build the kernel would abort;
    RuntimeError (with the indexer's stderr tail) if the indexer fails.
    """
    _check_eos(eos_token_id, vocab_size)
    final = Path(save_dir).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        index_dir = work / "index"
        index_dir.mkdir()
        dtype = token_dtype_for(vocab_size)
        n_docs, n_tokens = write_pretokenized(docs, index_dir, vocab_size, dtype)
        dtype, n_distinct, compact = _choose_width(index_dir, vocab_size, dtype)
        start = time.perf_counter()
        _run_indexer(index_dir, work, dtype, cpus, mem_gb)
        seconds = time.perf_counter() - start
        _check_table(index_dir, dtype)
        index_bytes = sum(f.stat().st_size for f in index_dir.iterdir())
        if final.exists():
            shutil.rmtree(final)
        os.replace(index_dir, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "n_docs": n_docs,
        "n_tokens": n_tokens,
        "build_seconds": seconds,
        "index_bytes": index_bytes,
        "bytes_per_token": index_bytes / n_tokens,
        "token_dtype": dtype,
        "compact_vocab": compact,
        "distinct_tokens": n_distinct,
    }


def _choose_width(index_dir: Path, vocab_size: int, dtype: str) -> tuple[str, int, bool]:
    """(token width, distinct corpus ids, compact?) of the index; compacts u32 input that fits.

    u16 input stays as written. u32 input with few enough distinct ids is rewritten as
    compact u16; otherwise it stays u32 after the overcommit check.
    """
    ids = distinct_ids(index_dir / "tokenized", dtype, vocab_size)
    if dtype == "u16":
        return dtype, len(ids), False
    if fits_compact(len(ids)):
        compact_files(index_dir, ids)
        return "u16", len(ids), True
    check_overcommit(len(ids))
    return dtype, len(ids), False


class OvercommitError(RuntimeError):
    """A u32 index build that the kernel's memory-overcommit policy would abort."""


def check_overcommit(n_distinct: int) -> None:
    """Stop before a u32 build the kernel would abort, saying what to run and why.

    Passes when `vm.overcommit_memory` is 1, or 0 with more RAM + swap than the indexer
    reserves; where the setting is unreadable (not Linux) nothing is checked. kvspec never
    changes the setting itself: it is machine-wide and needs root.
    """
    mode = _read_text(OVERCOMMIT_SETTING)
    if mode is None or mode == "1":
        return
    memory = _ram_and_swap_bytes()
    if mode == "0" and memory > U32_INDEXER_BYTES:
        return
    raise OvercommitError(
        f"This corpus uses {n_distinct:,} distinct token ids, more than a 16-bit index can "
        f"hold ({MAX_COMPACT_IDS:,}), so it needs a 32-bit (u32) infini-gram index. The u32 "
        f"indexer reserves 2^32 x 8 bytes ({U32_INDEXER_BYTES / 2**30:.0f} GiB) of memory up "
        f"front, and this kernel refuses that: vm.overcommit_memory is {mode} and RAM + swap "
        f"is {memory / 2**30:.1f} GiB. To allow it (most of that memory is never touched), "
        "run as root:\n"
        "    sysctl vm.overcommit_memory=1\n"
        f"and rerun; the setting lasts until reboot (undo: sysctl vm.overcommit_memory={mode})."
        " kvspec does not change kernel settings itself."
    )


def _read_text(path: Path) -> str | None:
    """A small system file's stripped content, or None if it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _ram_and_swap_bytes() -> int:
    """MemTotal + SwapTotal from /proc/meminfo (0 if unreadable)."""
    fields = {}
    for line in (_read_text(MEMINFO) or "").splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    kib = [int(fields[k][0]) for k in ("MemTotal", "SwapTotal") if fields.get(k)]
    return sum(kib) * 1024


def write_pretokenized(
    docs: Iterable[Sequence[int]], index_dir: Path, vocab_size: int, dtype: str
) -> tuple[int, int]:
    """Write `tokenized` and `offset` for `docs` into `index_dir`; return (n_docs, n_tokens)."""
    width = 2 if dtype == "u16" else 4
    separator = b"\xff" * width
    offsets: list[int] = []
    position = n_tokens = 0
    with open(index_dir / "tokenized", "wb") as out:
        for doc_ix, doc in enumerate(docs):
            ids = _validated_ids(doc, doc_ix, vocab_size)
            payload = separator + ids.astype(f"<u{width}").tobytes()
            out.write(payload)
            offsets.append(position)
            position += len(payload)
            n_tokens += len(ids)
        # A closing empty document: no match can then end at the very end of the data, where
        # the engine's ntd would read eos for the whole range (start and end both map to eos).
        out.write(separator)
        offsets.append(position)
    if n_tokens == 0:
        raise ValueError("cannot build an n-gram index from an empty corpus (no tokens)")
    (index_dir / "offset").write_bytes(np.asarray(offsets, dtype="<u8").tobytes())
    return len(offsets) - 1, n_tokens


def _validated_ids(doc: Sequence[int], doc_ix: int, vocab_size: int) -> np.ndarray:
    """Return `doc` as an int64 array, or raise ValueError naming the document and the bad id."""
    if isinstance(doc, str | bytes):
        raise ValueError(f"document {doc_ix} is a {type(doc).__name__}, expected token ids")
    ids = list(doc)
    for pos, tok in enumerate(ids):
        if isinstance(tok, bool) or not isinstance(tok, int | np.integer):
            raise ValueError(
                f"document {doc_ix}, position {pos}: token {tok!r} is not an integer id"
            )
        if tok < 0:
            raise ValueError(f"document {doc_ix}, position {pos}: negative token id {tok}")
        if tok >= vocab_size:
            raise ValueError(
                f"document {doc_ix}, position {pos}: token id {tok} >= vocab_size {vocab_size}"
            )
    return np.asarray(ids, dtype=np.int64)


def _check_eos(eos_token_id: int, vocab_size: int) -> None:
    """Reject an eos id the engine would assert on later."""
    if not 0 <= eos_token_id < vocab_size:
        raise ValueError(f"eos_token_id {eos_token_id} is outside [0, vocab_size={vocab_size})")


def _run_indexer(index_dir: Path, work: Path, dtype: str, cpus: int, mem_gb: int) -> None:
    """Run the suffix-array builder on the pre-tokenized files in `index_dir`."""
    data_dir = work / "empty-data"  # must exist; the prepare step is skipped
    data_dir.mkdir()
    ds_bytes = (index_dir / "tokenized").stat().st_size
    workers = max(1, min(cpus, ds_bytes // (2 * _INDEXER_HACK_BYTES)))
    cmd = [
        sys.executable, "-m", "infini_gram.indexing_v6",
        "--data_dir", str(data_dir), "--save_dir", str(index_dir),
        "--temp_dir", str(work / "indexer-tmp"), "--token_dtype", dtype,
        "--cpus", str(workers), "--mem", str(mem_gb), "--ulimit", "20000",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    failed = "went wrong" in proc.stdout or not (index_dir / "table").exists()
    if proc.returncode != 0 or failed:
        tail = (proc.stderr or proc.stdout)[-_STDERR_TAIL_CHARS:]
        raise RuntimeError(f"infini-gram indexer failed (exit {proc.returncode}):\n{tail}")


def _check_table(index_dir: Path, dtype: str) -> None:
    """Raise RuntimeError unless the suffix array holds one pointer of the right width per token."""
    width = 2 if dtype == "u16" else 4
    ds_bytes = (index_dir / "tokenized").stat().st_size
    ptr_bytes = math.ceil(math.log2(ds_bytes) / 8)
    expected = ds_bytes // width * ptr_bytes
    actual = (index_dir / "table").stat().st_size
    if actual != expected:
        raise RuntimeError(f"suffix array has {actual} bytes, expected {expected}: index corrupt")


def open_engine(
    index_dir: str | os.PathLike[str],
    vocab_size: int,
    eos_token_id: int,
    max_support: int = 1000,
) -> CheckedEngine:
    """Open an index for queries in the model's ids; engine errors are raised as exceptions.

    An index over a compact vocabulary is opened over its compact ids, and the returned
    engine translates every query and answer (see `CheckedEngine`).
    """
    from infini_gram.engine import InfiniGramEngine

    index_dir = Path(index_dir)
    if not (index_dir / "table").exists():
        raise FileNotFoundError(f"no infini-gram index (missing 'table') in {index_dir}")
    _check_eos(eos_token_id, vocab_size)
    vocab = load_vocab_map(index_dir, vocab_size, eos_token_id)
    engine = InfiniGramEngine(
        index_dir=str(index_dir),
        eos_token_id=vocab.eos if vocab else eos_token_id,
        vocab_size=vocab.engine_vocab_size if vocab else vocab_size,
        version=4,
        token_dtype="u16" if vocab else token_dtype_for(vocab_size),
        max_support=max_support,
    )
    return CheckedEngine(engine, index_dir, vocab_size, eos_token_id, max_support, vocab)


class InfiniGramError(RuntimeError):
    """An infini-gram engine call returned {"error": ...}."""


# Engine methods translated for a compact vocabulary, and their id arguments. Answers are
# translated by key (`result_by_token_id`, `token_ids`, `documents`); the other methods
# (unigram counts, attribution) would leak compact ids, so a compact engine hides them.
_TRANSLATED = frozenset(
    {"find", "count", "prob", "ntd", "infgram_prob", "infgram_ntd", "search_docs",
     "find_cnf", "count_cnf", "search_docs_cnf", "creativity", "get_total_doc_cnt",
     "get_doc_by_rank", "get_docs_by_ranks", "get_doc_by_ptr", "get_docs_by_ptrs",
     "get_doc_by_ix", "get_docs_by_ixs", "get_doc_by_rank_2", "get_docs_by_ranks_2",
     "get_doc_by_ptr_2", "get_docs_by_ptrs_2", "get_doc_by_ix_2", "get_docs_by_ixs_2"}
)  # fmt: skip
_ID_LIST_ARGS = frozenset({"input_ids", "prompt_ids"})


class CheckedEngine:
    """Wrap an `InfiniGramEngine` so that `{"error": ...}` answers raise `InfiniGramError`.

    Query ids are converted to plain ints first (the engine rejects numpy and torch ints).
    Any engine method is reachable by attribute; `raw` is the wrapped engine.

    With a compact vocabulary (`vocab`), queries and answers are in the model's ids: ids
    absent from the corpus match nothing, ids outside [0, vocab_size) raise
    `InfiniGramError`, distributions come back keyed (and ordered) by model id, and
    document-end continuations as the model's eos. `raw` then speaks compact ids.
    """

    def __init__(
        self,
        engine: Any,
        index_dir: Path,
        vocab_size: int,
        eos_token_id: int,
        max_support: int,
        vocab: VocabMap | None = None,
    ) -> None:
        self.raw = engine
        self.index_dir = index_dir
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.max_support = max_support
        self.vocab = vocab
        self.token_dtype = "u16" if vocab else token_dtype_for(vocab_size)
        self._signatures: dict[str, tuple[str, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.raw, name)
        if not callable(method):
            return method
        if self.vocab is not None:
            return self._translated(method, name)

        def checked(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_plain(a) for a in args)
            kwargs = {k: _plain(v) for k, v in kwargs.items()}
            return _raise_on_error(method(*args, **kwargs), name)

        return checked

    def _translated(self, method: Any, name: str) -> Any:
        """`method` taking and answering model ids, for an engine over compact ids."""
        if name not in _TRANSLATED:
            raise AttributeError(f"infini-gram {name} is not translated for compact vocabularies")
        if name not in self._signatures:
            self._signatures[name] = tuple(inspect.signature(method).parameters)
        params = self._signatures[name]

        def translated(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(params):
                raise TypeError(f"{name}() takes {len(params)} arguments, got {len(args)}")
            call = {**dict(zip(params, args, strict=False)), **kwargs}
            call = {k: self._engine_arg(k, _plain(v)) for k, v in call.items()}
            return self._model_answer(_raise_on_error(method(**call), name))

        return translated

    def _engine_arg(self, name: str, value: Any) -> Any:
        """An argument with its model ids replaced by compact ids (others unchanged)."""
        if name in _ID_LIST_ARGS:
            return self._compact(value)
        if name == "cont_id" and isinstance(value, int):
            return self._compact([value])[0]
        if name == "cnf" and isinstance(value, list):
            return [[self._compact(_plain(q)) for q in clause] for clause in value]
        return value

    def _compact(self, ids: Any) -> Any:
        """Compact ids of a list of model ids; anything else is left for the engine to reject."""
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            return ids
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(t for t in ids if not 0 <= t < self.vocab_size)
            raise InfiniGramError(f"token id {bad} outside [0, vocab_size={self.vocab_size})")
        return self.vocab.to_compact(ids)

    def _model_answer(self, answer: Any) -> Any:
        """An engine answer with its compact ids replaced by model ids."""
        if isinstance(answer, list):
            return [self._model_answer(a) for a in answer]
        if not isinstance(answer, dict):
            return answer
        out = dict(answer)
        if "result_by_token_id" in out:
            dist = out["result_by_token_id"]
            ids = self.vocab.to_original(dist)
            out["result_by_token_id"] = dict(sorted(zip(ids, dist.values(), strict=True)))
        if "token_ids" in out:
            out["token_ids"] = self.vocab.to_original(out["token_ids"])
        if "documents" in out:
            out["documents"] = self._model_answer(out["documents"])
        return out


def _plain(value: Any) -> Any:
    """Turn id sequences (lists, tuples, arrays, tensors) into lists of Python ints."""
    if hasattr(value, "tolist") and not isinstance(value, list):
        value = value.tolist()
    if isinstance(value, tuple | list) and all(isinstance(v, int | np.integer) for v in value):
        return [int(v) for v in value]
    return value


def _raise_on_error(result: Any, call: str) -> Any:
    """Return `result` unless it is an engine error dict."""
    if isinstance(result, dict) and "error" in result:
        raise InfiniGramError(f"infini-gram {call}: {result['error']}")
    return result
