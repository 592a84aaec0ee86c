"""Tree speculative decoding: a draft tree verified in one target forward (EAGLE-2's scheme).

A `DraftTree` holds candidate continuations of the committed sequence as a tree rooted at the
last committed token. The target reads every node in one forward: each node attends to the
cached prefix, its ancestors and itself (a 4-D additive mask) at position prefix + depth.
Greedy verification walks down from the root while the target's argmax is a child's token;
the cache then keeps the prefix, the root and the accepted path, in order, so the next step
sees exactly the cache plain greedy decoding would have built. Greedy tree decoding therefore
equals greedy decoding token for token, whatever the tree.

`ModelTreeDrafter` grows EAGLE-2's dynamic tree with any small causal LM: at each depth the
`topk` best frontier nodes by joint draft probability are expanded by `topk` children each
(one batched draft forward with the same tree mask); all candidates are then reranked and the
best `total` form the tree (joint probabilities fall along a path, so the choice is closed
under ancestors). `ChainTree` turns any chain drafter into a one-branch tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from kvspec.decoding.cache import check_full, keep_positions
from kvspec.decoding.drafts import Drafter
from kvspec.decoding.loop import (
    Step,
    as_prompt,
    ended,
    forward_tokens,
    session,
    truncate_at_eos,
)

ROOT = -1  # parent index of the root's children


@dataclass
class DraftTree:
    """Nodes in creation order (a parent before its children); parent ROOT = the last
    committed token. `scores` are joint draft log-probabilities (0 when unknown)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.parents) == len(self.scores):
            raise ValueError("tokens, parents and scores must have one entry per node")
        if any(not ROOT <= p < i for i, p in enumerate(self.parents)):
            raise ValueError("every parent must precede its child (or be ROOT)")

    @classmethod
    def chain(cls, tokens: Sequence[int]) -> DraftTree:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), [0.0] * len(tokens))

    def depths(self) -> list[int]:
        """Depth of each node; the root's children are at depth 1."""
        out: list[int] = []
        for p in self.parents:
            out.append(1 if p == ROOT else out[p] + 1)
        return out

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node`."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def additive_mask(
    visible: Sequence[Sequence[int]], past: int, dtype: torch.dtype, prefix: int | None = None
) -> torch.Tensor:
    """A (1, 1, q, past + q) additive mask: row i sees positions [0, prefix) (default: the
    whole cache) and `visible[i]` (absolute key positions), nothing else."""
    return bool_to_additive(visible_slots(visible, past, prefix), dtype)


def visible_slots(
    visible: Sequence[Sequence[int]], past: int, prefix: int | None = None
) -> torch.Tensor:
    """`additive_mask`'s pattern as booleans (True = seen).  # (q, past + q)"""
    q = len(visible)
    allowed = torch.zeros(q, past + q, dtype=torch.bool)
    allowed[:, : past if prefix is None else prefix] = True
    for i, cols in enumerate(visible):
        allowed[i, list(cols)] = True
    return allowed


def sliding_window(config: Any) -> int | None:
    """The window of a model whose layers (some or all) attend only to the last
    `sliding_window` positions (Gemma-2/3, Mistral, ...); None when every layer sees all."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if window is None or (types is not None and "sliding_attention" not in types):
        return None
    return int(window)


def model_mask(
    config: Any,
    allowed: torch.Tensor,
    query_pos: Sequence[int],
    key_pos: Sequence[int],
    dtype: torch.dtype,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive mask(s) a model reads for queries at `query_pos` over cache slots holding
    positions `key_pos` (`allowed` (q, kv): the pattern without a window). Sliding-window layers
    also lose keys `sliding_window` or more positions behind the query (HF's rule, as plain
    decoding over a full cache); a model with both layer types gets one mask per type."""
    window = sliding_window(config)
    if window is None:
        return bool_to_additive(allowed, dtype)
    gap = torch.tensor(list(query_pos))[:, None] - torch.tensor(list(key_pos))[None, :]
    windowed = bool_to_additive(allowed & (gap < window), dtype)
    types = getattr(config, "layer_types", None)
    if types is None:  # every layer slides (Mistral): one mask
        return windowed
    full = bool_to_additive(allowed, dtype)
    return {t: windowed if t == "sliding_attention" else full for t in set(types)}


def stack_masks(masks: Sequence[Any]) -> Any:
    """One (B, 1, q, kv) mask, or one per layer type, from per-row `model_mask`s."""
    if isinstance(masks[0], dict):
        return {t: torch.cat([m[t] for m in masks]) for t in masks[0]}
    return torch.cat(list(masks))


def to_device(mask: torch.Tensor | dict[str, torch.Tensor], device: Any) -> Any:
    if isinstance(mask, dict):
        return {t: m.to(device) for t, m in mask.items()}
    return mask.to(device)


def layer_rope(rotary: Any, x: torch.Tensor, positions: torch.Tensor,
               layers: Sequence[torch.nn.Module]) -> list[Any]:  # fmt: skip
    """Each decoder layer's rotary (cos, sin) at `positions`: models whose layer types rotate
    differently (Gemma-3: one RoPE base for sliding, another for full attention) take the
    layer's type; the others one table for all."""
    types = [getattr(getattr(layer, "self_attn", None), "layer_type", None) for layer in layers]
    if not hasattr(rotary, "layer_types"):  # one RoPE for every layer
        rope = rotary(x, position_ids=positions)
        return [rope] * len(layers)
    tables = {t: rotary(x, positions, t) for t in set(types)}
    return [tables[t] for t in types]


def causal_mask(past: int, q: int, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, q, past + q) additive mask: new token i sees the cache and new tokens <= i."""
    return bool_to_additive(torch.ones(q, past + q, dtype=torch.bool).tril(diagonal=past), dtype)


def bool_to_additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where `allowed` (q, kv), the dtype's minimum elsewhere, as (1, 1, q, kv)."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def tree_logits(model: torch.nn.Module, cache: Any, root: int, tree: DraftTree) -> torch.Tensor:
    """Feed the root and every node after the cached prefix; next-token logits per row
    (row 0: the root, row i + 1: node i); an empty tree is a plain greedy step.  # (n + 1, V)"""
    if not tree.tokens:
        return forward_tokens(model, cache, [root])
    past = cache.get_seq_length()
    for layer in cache.layers:
        check_full(layer, len(tree.tokens) + 1)
    positions = [past + d for d in [0, *tree.depths()]]
    rows = [[past]] + [
        [past, *(past + 1 + a for a in tree.path(i))] for i in range(len(tree.tokens))
    ]
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    mask = model_mask(model.config, visible_slots(rows, past), positions,
                      [*range(past), *positions], dtype)  # fmt: skip
    out = model(
        input_ids=torch.tensor([[root, *tree.tokens]], device=device),  # (1, n + 1)
        attention_mask=to_device(mask, device),
        position_ids=torch.tensor([positions], device=device),
        past_key_values=cache,
        use_cache=True,
    )
    return out.logits[0].cpu()


def verify_tree_greedy(logits: torch.Tensor, tree: DraftTree) -> tuple[list[int], int]:
    """(accepted nodes from the root down, the target's next token after them)."""
    children: dict[tuple[int, int], int] = {}
    for i, (p, t) in enumerate(zip(tree.parents, tree.tokens, strict=True)):
        children.setdefault((p, t), i)
    node, path = ROOT, []
    while True:
        token = int(torch.argmax(logits[node + 1]))
        child = children.get((node, token))
        if child is None:
            return path, token
        path.append(child)
        node = child


class TreeDrafter(Protocol):
    """Anything that proposes a draft tree of depth at most `max_depth` after `context`."""

    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree: ...


class ChainTree:
    """A chain drafter's `k` tokens as a one-branch tree."""

    def __init__(self, drafter: Drafter, k: int) -> None:
        self.drafter, self.k = drafter, k

    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        draft = self.drafter.propose(context, min(self.k, max_depth))
        return DraftTree.chain(draft.tokens[: min(self.k, max_depth)] if draft else [])


Feed = Callable[[DraftTree, list[int]], torch.Tensor]


def tree_shape(depth: int, topk: int, total: int) -> tuple[int, int, int]:
    """(depth, topk, total) of an EAGLE-2 tree drafter, checked."""
    if min(depth, topk, total) < 1:
        raise ValueError("depth, topk and total must be at least 1")
    return depth, topk, total


def grow_tree(
    root_logits: torch.Tensor, feed: Feed, depth: int, topk: int, total: int
) -> DraftTree:
    """EAGLE-2's dynamic draft tree from a drafter's next-token logits.

    `root_logits` (V,) follow the committed context; `feed(tree, nodes)` runs the drafter on
    `nodes` (their ancestors already fed) and returns their next-token logits (n, V). At each
    depth the `topk` frontier nodes of highest joint log-probability get `topk` children each;
    the `total` best nodes of all form the tree."""
    tree = DraftTree()
    frontier = _children(tree, ROOT, 0.0, torch.log_softmax(root_logits.double(), -1), topk)
    for _ in range(depth - 1):
        best = sorted(frontier, key=lambda i: -tree.scores[i])[:topk]
        rows = torch.log_softmax(feed(tree, best).double(), -1)  # (len(best), V)
        frontier = []
        for node, row in zip(best, rows, strict=True):
            frontier += _children(tree, node, tree.scores[node], row, topk)
    return _best_subtree(tree, total)


def _children(
    tree: DraftTree, parent: int, score: float, logp: torch.Tensor, topk: int
) -> list[int]:
    """Add `parent`'s top-k children to `tree`; return their indices."""
    values, tokens = torch.topk(logp, min(topk, logp.shape[-1]))
    start = len(tree.tokens)
    for v, t in zip(values.tolist(), tokens.tolist(), strict=True):
        tree.tokens.append(int(t))
        tree.parents.append(parent)
        tree.scores.append(score + float(v))
    return list(range(start, len(tree.tokens)))


def tree_rows(tree: DraftTree, nodes: list[int], fed: dict[int, int], past: int) -> list[list[int]]:
    """Give `nodes` the cache slots past, past + 1, ... in `fed`; for each, the slots it sees
    among the fed nodes (its ancestors and itself)."""
    for j, node in enumerate(nodes):
        fed[node] = past + j
    return [[fed[a] for a in tree.path(node)] for node in nodes]


def _best_subtree(tree: DraftTree, total: int) -> DraftTree:
    """The `total` nodes of highest score, re-indexed (ties go to the earlier node, so a node
    is never kept without its parent: a child's score is at most its parent's)."""
    keep = sorted(range(len(tree.tokens)), key=lambda i: (-tree.scores[i], i))[:total]
    keep.sort()
    new = {old: j for j, old in enumerate(keep)}
    parents = [ROOT if tree.parents[i] == ROOT else new[tree.parents[i]] for i in keep]
    return DraftTree([tree.tokens[i] for i in keep], parents, [tree.scores[i] for i in keep])


@torch.inference_mode()
def tree_generate(
    target: torch.nn.Module,
    input_ids: torch.Tensor | list[int],
    drafter: TreeDrafter,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None = None,
) -> tuple[list[int], list[Step]]:
    """Greedy tree speculative decoding; equals greedy decoding token for token.

    Step.drafted counts the tree's nodes (what the target verified), Step.accepted the
    accepted path's length; the tree is never deeper than the remaining budget allows.
    Drafters that read the target's state get it as in `speculative_generate`: `observe`
    the features of the committed positions, `observe_cache` the cache of verified positions.
    A drafter with `tree_feedback(tree, path, seconds)` hears each step's accepted nodes and
    verification time (an adaptive drafter learns from them, as from the chain loop's
    `feedback`).
    """
    prompt = as_prompt(input_ids)
    with session(target, prompt, drafter) as (cache, tap, observe, watch):
        seq, new, steps = list(prompt), [], []
        while len(new) < max_new_tokens and not ended(new, eos_token_id):
            budget = max_new_tokens - len(new) - 1
            t0 = time.perf_counter()
            tree = drafter.propose_tree(seq, budget) if budget > 0 else DraftTree()
            t1 = time.perf_counter()
            past = cache.get_seq_length()
            path, nxt = verify_tree_greedy(tree_logits(target, cache, seq[-1], tree), tree)
            if len(path) < len(tree.tokens):  # drop the rejected nodes
                keep_positions(cache, [*range(past + 1), *(past + 1 + i for i in path)])
            if observe is not None:  # features of the old last token and the accepted path
                observe(tap.last[[0, *(1 + i for i in path)]], len(seq) - 1)
            if watch is not None:
                watch(cache)
            t2 = time.perf_counter()
            if hasattr(drafter, "tree_feedback"):
                drafter.tree_feedback(tree, path, t2 - t1)
            emitted = truncate_at_eos([*(tree.tokens[i] for i in path), nxt], eos_token_id)
            seq += emitted
            new += emitted
            accepted = min(len(path), len(emitted))
            steps.append(Step(len(tree.tokens), accepted, t1 - t0, t2 - t1,
                              cache.get_seq_length(), float(accepted)))  # fmt: skip
    return new[:max_new_tokens], steps
