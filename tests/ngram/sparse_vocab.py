"""Corpora over a few large ids of a 262,144-token vocabulary, and their reference twins.

The compact index is built from the model's (sparse, large) ids. Its reference is the same
corpus relabelled densely (rank in a sorted "universe" of corpus ids, unseen ids and eos),
indexed the ordinary u16 way; its answers are mapped back to model ids for comparison.
Both relabellings are monotone and stay below 255, so the two suffix arrays sort alike
(little-endian u16 bytes compare like the ids then) and even the engine's subsampled
distributions (counts above max_support) must agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvspec.ngram.index import CheckedEngine, build_index, open_engine

LARGE_VOCAB = 262_144


@dataclass
class Twin:
    """A compact-vocabulary index and its relabelled reference over the same documents."""

    compact: CheckedEngine  # model ids in and out
    reference: CheckedEngine  # reference ids in and out
    docs: list[list[int]]  # model ids
    universe: np.ndarray  # (U,) sorted model ids: corpus, unseen, eos; reference id = rank
    unseen: list[int]  # model ids absent from the corpus
    eos: int

    def to_ref(self, ids: list[int]) -> list[int]:
        return np.searchsorted(self.universe, ids).tolist()

    def to_model(self, ids: Any) -> Any:
        return self.universe[np.asarray(ids, dtype=np.int64)].tolist()

    def dist_to_model(self, dist: dict[int, Any]) -> dict[int, Any]:
        """A reference distribution keyed by model ids, in key order (as the engine's)."""
        return dict(zip(self.to_model(list(dist)), dist.values(), strict=True))


def sparse_docs(
    seed: int, n_ids: int = 150, n_docs: int = 150, eos_in_corpus: bool = True
) -> tuple[list[list[int]], np.ndarray, int]:
    """(docs, universe, eos): Zipf-weighted documents over sparse ids, 40+ unseen ids, eos.

    With `eos_in_corpus` every document ends with eos (it is never a regular token); else
    eos is one of the unseen ids.
    """
    rng = np.random.default_rng(seed)
    universe = np.sort(rng.choice(LARGE_VOCAB, size=n_ids + 41, replace=False))
    eos = int(universe[rng.integers(len(universe))])
    alphabet = rng.permutation(universe[universe != eos])[:n_ids]
    weights = 1.0 / np.arange(1, n_ids + 1) ** 1.1
    weights /= weights.sum()
    docs = [
        rng.choice(alphabet, size=int(rng.integers(1, 40)), p=weights).tolist()
        for _ in range(n_docs)
    ]
    if eos_in_corpus:
        docs = [d + [eos] for d in docs]
    return docs, universe, eos


def build_twin(
    path: Path, seed: int, eos_in_corpus: bool = True, max_support: int = 1000, **kw: Any
) -> Twin:
    """Build both indexes under `path` and open them."""
    docs, universe, eos = sparse_docs(seed, eos_in_corpus=eos_in_corpus, **kw)
    stats = build_index(docs, path / "compact", LARGE_VOCAB, eos)
    assert stats["compact_vocab"] and stats["token_dtype"] == "u16"
    ref_docs = [np.searchsorted(universe, d).tolist() for d in docs]
    ref_eos = int(np.searchsorted(universe, eos))
    build_index(ref_docs, path / "reference", len(universe), ref_eos)
    compact = open_engine(path / "compact", LARGE_VOCAB, eos, max_support)
    reference = open_engine(path / "reference", len(universe), ref_eos, max_support)
    unseen = sorted(set(universe.tolist()) - {t for d in docs for t in d})
    return Twin(compact, reference, docs, universe, unseen, eos)


def contexts(twin: Twin, seed: int, n: int) -> list[list[int]]:
    """Contexts in model ids: copied document spans (long matches), random ids, unseen ids."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        doc = twin.docs[int(rng.integers(len(twin.docs)))]
        start = int(rng.integers(len(doc)))
        ctx = doc[start : start + int(rng.integers(0, 12))]
        if rng.random() < 0.5:
            ctx = rng.choice(twin.universe, size=int(rng.integers(0, 4))).tolist() + ctx
        if rng.random() < 0.3:
            ctx = ctx + [int(rng.choice(twin.unseen))] + doc[:2]
        out.append([int(t) for t in ctx])
    return out
