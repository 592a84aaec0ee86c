"""The request-local + index hybrid as a draft tree (SuffixDecoding-style, on our index).

Each step looks for the longest suffix of the context (up to `max_match` tokens) that also
occurs earlier in the context (prompt and output so far). Every earlier occurrence's
continuation goes into a trie; a node's empirical probability is the share of occurrences
that continue through it, and nodes below `min_prob` are dropped (SuffixDecoding's
`min_token_prob`). Deeper matches earn deeper trees: depth <= `factor` x match length
(its `max_spec_factor`), at most `depth`. The infini-gram index adds its one-lookup chain
(`inf_nkt`, at most `index_k` tokens) as a further branch. Either part is used only when its
match is long enough (`min_local`, `min_index`): a draft with a one-token match is rarely
accepted, and on a CPU a verification with any draft costs ~1.6 greedy steps (measured; see
the README), so a step with nothing worth verifying is a plain greedy step.

`HybridTreeDrafter.propose_tree` is verified by `kvspec.decoding.tree.tree_generate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from kvspec.decoding.drafts import Drafter
from kvspec.decoding.tree import ROOT, DraftTree
from kvspec.ngram.native import native


@dataclass(frozen=True)
class LocalTreeSettings:
    """Knobs of `HybridTreeDrafter` (config: spec.decode.local_tree; defaults in the schema)."""

    factor: float  # local tree depth <= factor x match length
    min_prob: float  # keep trie nodes continued by at least this share of occurrences
    max_nodes: int  # local trie nodes kept (most probable first)
    depth: int  # local tree depth cap
    max_match: int  # longest suffix looked up in the context
    index_k: int  # tokens of the index's chain
    min_local: int  # local tree only when the context suffix matched >= this many tokens
    min_index: int  # index chain only when its match is >= this many tokens

    @classmethod
    def from_config(cls, block: Mapping[str, Any] | None) -> LocalTreeSettings:
        known = {f.name for f in fields(cls)}
        unknown = set(block or {}) - known
        if unknown:
            raise ValueError(
                f"unknown local_tree settings {sorted(unknown)}; known: {sorted(known)}"
            )
        return cls(**dict(block or {}))

    @classmethod
    def defaults(cls, **overrides: Any) -> LocalTreeSettings:
        """The schema's spec.decode.local_tree defaults with `overrides`."""
        from kvspec.config import schema_defaults

        return cls.from_config({**schema_defaults("spec", "decode", "local_tree"), **overrides})


def earlier_matches(ctx: np.ndarray, max_match: int) -> tuple[int, np.ndarray]:
    """(n, ends): the longest n <= max_match such that the last n tokens also end at earlier
    positions `ends` (ascending, each < len - 1, so a continuation exists); (0, []) if none."""
    n, ends = native().earlier_matches(np.asarray(ctx, dtype=np.int64).tolist(), max_match)
    return n, np.asarray(ends, dtype=np.int64)


def continuation_tree(
    ctx: np.ndarray, ends: np.ndarray, depth: int, min_prob: float, max_nodes: int
) -> DraftTree:
    """The trie of the `depth` tokens after each position in `ends`, nodes scored by the
    share of continuations through them, those below `min_prob` dropped, the `max_nodes`
    most probable kept (a child never outranks its parent, so the kept set is a tree)."""
    counts: dict[tuple[int, ...], int] = {}
    for end in ends.tolist():
        key: tuple[int, ...] = ()
        for token in ctx[end + 1 : end + 1 + depth].tolist():
            key += (int(token),)
            counts[key] = counts.get(key, 0) + 1
    total = max(len(ends), 1)
    kept = sorted((k for k, c in counts.items() if c / total >= min_prob),
                  key=lambda k: (-counts[k], len(k)))[:max_nodes]  # fmt: skip
    return _from_paths(sorted(kept, key=len), {k: counts[k] / total for k in kept})


def merge_trees(trees: Sequence[DraftTree]) -> DraftTree:
    """One tree holding every path of `trees` (shared prefixes once; first score kept)."""
    paths: list[tuple[int, ...]] = []
    score: dict[tuple[int, ...], float] = {}
    for tree in trees:
        key_of: dict[int, tuple[int, ...]] = {}
        for i, (p, t) in enumerate(zip(tree.parents, tree.tokens, strict=True)):
            key_of[i] = (key_of[p] if p != ROOT else ()) + (t,)
            if key_of[i] not in score:
                paths.append(key_of[i])
                score[key_of[i]] = tree.scores[i]
    return _from_paths(paths, score)


def _from_paths(
    paths: Sequence[tuple[int, ...]], score: Mapping[tuple[int, ...], float]
) -> DraftTree:
    """A DraftTree from token paths listed parent before child."""
    index: dict[tuple[int, ...], int] = {}
    tree = DraftTree()
    for path in paths:
        if len(path) > 1 and path[:-1] not in index:
            continue  # its parent was not kept
        index[path] = len(tree.tokens)
        tree.tokens.append(path[-1])
        tree.parents.append(ROOT if len(path) == 1 else index[path[:-1]])
        tree.scores.append(float(score[path]))
    return tree


class HybridTreeDrafter:
    """Request-local continuation trie + the index's chain, as one draft tree."""

    def __init__(self, index: Drafter | None, settings: LocalTreeSettings) -> None:
        self.index, self.settings = index, settings
        self.chosen = {"local": 0, "index": 0}  # steps each part contributed to

    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        s = self.settings
        parts = []
        ctx = np.asarray(context, dtype=np.int64)
        n, ends = earlier_matches(ctx, s.max_match)
        depth = min(s.depth, max_depth, int(s.factor * n))
        if n >= s.min_local and depth >= 1:
            parts.append(continuation_tree(ctx, ends, depth, s.min_prob, s.max_nodes))
            self.chosen["local"] += 1
        if self.index is not None and min(s.index_k, max_depth) >= 1:
            draft = self.index.propose(context, min(s.index_k, max_depth))
            if draft.tokens and draft.match_len >= s.min_index:
                parts.append(DraftTree.chain(draft.tokens[: min(s.index_k, max_depth)]))
                self.chosen["index"] += 1
        return merge_trees(parts)
