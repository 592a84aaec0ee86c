"""Build and open infini-gram suffix-array indexes from already tokenized documents.

The indexer's own `--tokenizer` option fetches tokenizers from the hub, so we write its
pre-tokenized input files ourselves and let it build only the suffix array. The result is a
directory the `InfiniGramEngine` can serve (files `tokenized`, `offset`, `table`).
"""

from __future__ import annotations

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

# The indexer splits the corpus into parts that overlap by this many bytes; parts smaller than
# the overlap produce a corrupt table, so small corpora are built with one worker.
_INDEXER_HACK_BYTES = 100_000
_STDERR_TAIL_CHARS = 2000


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

    Token width is u16 when `vocab_size < 65535`, else u32. A u32 build allocates 2^32 * 8
    bytes up front and aborts unless the kernel allows memory overcommit
    (`sysctl vm.overcommit_memory=1`); the engine serves u32 indexes without that.

    Raises ValueError for an empty corpus or an id that is negative, not an integer, or not
    below `vocab_size`; RuntimeError (with the indexer's stderr tail) if the indexer fails.
    """
    _check_eos(eos_token_id, vocab_size)
    dtype = token_dtype_for(vocab_size)
    final = Path(save_dir).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        index_dir = work / "index"
        index_dir.mkdir()
        n_docs, n_tokens = write_pretokenized(docs, index_dir, vocab_size, dtype)
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
    }


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
    """Open an index for queries; engine errors are raised as exceptions, not returned."""
    from infini_gram.engine import InfiniGramEngine

    index_dir = Path(index_dir)
    if not (index_dir / "table").exists():
        raise FileNotFoundError(f"no infini-gram index (missing 'table') in {index_dir}")
    _check_eos(eos_token_id, vocab_size)
    engine = InfiniGramEngine(
        index_dir=str(index_dir),
        eos_token_id=eos_token_id,
        vocab_size=vocab_size,
        version=4,
        token_dtype=token_dtype_for(vocab_size),
        max_support=max_support,
    )
    return CheckedEngine(engine, index_dir, vocab_size, eos_token_id, max_support)


class InfiniGramError(RuntimeError):
    """An infini-gram engine call returned {"error": ...}."""


class CheckedEngine:
    """Wrap an `InfiniGramEngine` so that `{"error": ...}` answers raise `InfiniGramError`.

    Query ids are converted to plain ints first (the engine rejects numpy and torch ints).
    Any engine method is reachable by attribute; `raw` is the wrapped engine.
    """

    def __init__(
        self, engine: Any, index_dir: Path, vocab_size: int, eos_token_id: int, max_support: int
    ) -> None:
        self.raw = engine
        self.index_dir = index_dir
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.max_support = max_support
        self.token_dtype = token_dtype_for(vocab_size)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.raw, name)
        if not callable(method):
            return method

        def checked(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_plain(a) for a in args)
            kwargs = {k: _plain(v) for k, v in kwargs.items()}
            return _raise_on_error(method(*args, **kwargs), name)

        return checked


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
