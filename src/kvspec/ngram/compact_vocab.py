"""Compact vocabularies: index a large-vocabulary corpus with 16-bit token ids.

A model whose vocabulary has 65,535 ids or more (Gemma 3: 262,144) needs a 32-bit infini-gram
index, whose builder reserves 2^32 * 8 bytes of memory up front. The corpora indexed here are
small, though, and use far fewer distinct ids than 16 bits can hold. So the occurring ids are
renumbered densely in sorted order (compact id = rank), the index is built over compact ids,
and the map is stored beside the index; `CheckedEngine` and `InfiniGramDrafter` translate on
the way in and out, so callers only ever see the model's own ids.

Compact id layout, for n distinct corpus ids:
    0 .. n-1   the corpus ids, in increasing order
    n          "unseen": every model id absent from the corpus (never occurs, so a query
               containing it counts 0, as in a full-vocabulary index). When eos is absent
               from the corpus it shares this id too: the engine reports document ends as
               eos, and n translates back to the model's eos.
    0xFFFF     the document separator
The order is monotone, so "smallest id" tie-breaks and sorted distributions agree between
compact and model ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

VOCAB_MAP_FILE = "vocab_map.npy"
U16_SEPARATOR = 0xFFFF
U32_SEPARATOR = 0xFFFF_FFFF
# Ids 0..n-1 for the corpus, n for unseen, and the separator must all stay distinct.
MAX_COMPACT_IDS = U16_SEPARATOR - 2
_CHUNK_TOKENS = 1 << 24  # bounded memory when scanning or rewriting a token file


def fits_compact(n_distinct: int) -> bool:
    """Whether n distinct corpus ids, the unseen id and the separator fit in 16 bits."""
    return n_distinct <= MAX_COMPACT_IDS


def distinct_ids(tokenized: Path, dtype: str, vocab_size: int) -> np.ndarray:
    """The sorted distinct token ids of a pre-tokenized file (separators excluded).  # (n,)"""
    width = 2 if dtype == "u16" else 4
    separator = U16_SEPARATOR if width == 2 else U32_SEPARATOR
    tokens = np.memmap(tokenized, dtype=f"<u{width}", mode="r")
    seen = np.zeros(vocab_size, dtype=bool)
    for start in range(0, len(tokens), _CHUNK_TOKENS):
        chunk = np.asarray(tokens[start : start + _CHUNK_TOKENS])
        seen[chunk[chunk != separator]] = True
    return np.flatnonzero(seen)


def compact_files(index_dir: Path, ids: np.ndarray) -> None:
    """Rewrite u32 `tokenized`/`offset` in `index_dir` as u16 compact ids and save the map.

    `ids` must hold every id of the file (from `distinct_ids`), sorted.
    """
    to_compact = np.zeros(int(ids[-1]) + 1, dtype=np.uint16)
    to_compact[ids] = np.arange(len(ids), dtype=np.uint16)
    source = index_dir / "tokenized"
    tokens = np.memmap(source, dtype="<u4", mode="r")
    target = index_dir / "tokenized.u16"
    with open(target, "wb") as out:
        for start in range(0, len(tokens), _CHUNK_TOKENS):
            chunk = np.asarray(tokens[start : start + _CHUNK_TOKENS])
            real = chunk != U32_SEPARATOR
            compact = np.full(len(chunk), U16_SEPARATOR, dtype="<u2")
            compact[real] = to_compact[chunk[real]]
            out.write(compact.tobytes())
    del tokens
    target.replace(source)
    offsets = np.fromfile(index_dir / "offset", dtype="<u8")
    (index_dir / "offset").write_bytes((offsets // np.uint64(2)).astype("<u8").tobytes())
    np.save(index_dir / VOCAB_MAP_FILE, ids.astype("<u4"))


class VocabMap:
    """Model ids <-> compact ids of one index (layout in the module docstring).

    `ids[c]` is the model id of compact id c. Queries go through `to_compact`, answers and
    suffix-array tokens through `to_original` / `original_lut`.
    """

    def __init__(self, ids: np.ndarray, vocab_size: int, eos_token_id: int) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        _check_map(ids, vocab_size)
        self.ids = ids
        self.vocab_size = vocab_size
        self.unseen = len(ids)
        self._compact = {int(t): c for c, t in enumerate(ids.tolist())}
        self.eos = self._compact.get(eos_token_id, self.unseen)
        lut = np.full(U16_SEPARATOR + 1, -1, dtype=np.int64)  # separator and spare ids -> -1
        lut[: len(ids)] = ids
        lut[self.unseen] = eos_token_id  # the only way `unseen` comes back: a document end
        self.original_lut = lut  # (65536,) compact id -> model id
        self._original = lut.tolist()

    @property
    def engine_vocab_size(self) -> int:
        """The vocabulary the engine sees: the corpus ids plus the unseen id."""
        return self.unseen + 1

    def to_compact(self, ids: Iterable[int]) -> list[int]:
        """Compact ids of in-range model ids; ids absent from the corpus become `unseen`."""
        get, unseen = self._compact.get, self.unseen
        return [get(t, unseen) for t in ids]

    def to_original(self, ids: Iterable[int]) -> list[int]:
        """Model ids of compact ids (-1 for ids that stand for no token, e.g. the separator)."""
        lut = self._original
        return [lut[t] for t in ids]


def load_vocab_map(index_dir: Path, vocab_size: int, eos_token_id: int) -> VocabMap | None:
    """The index's compact vocabulary, or None for an index over the model's own ids."""
    path = Path(index_dir) / VOCAB_MAP_FILE
    if not path.exists():
        return None
    return VocabMap(np.load(path), vocab_size, eos_token_id)


def _check_map(ids: np.ndarray, vocab_size: int) -> None:
    """Raise ValueError unless `ids` are increasing model ids that fit the compact layout."""
    if ids.ndim != 1 or not fits_compact(len(ids)):
        raise ValueError(f"vocab map must list at most {MAX_COMPACT_IDS} ids, got {ids.shape}")
    if len(ids) and (ids[0] < 0 or ids[-1] >= vocab_size or np.any(np.diff(ids) <= 0)):
        raise ValueError(
            f"vocab map must hold increasing ids in [0, vocab_size={vocab_size}); "
            "was the index built for another model?"
        )
