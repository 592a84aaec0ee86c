"""Replay a target's greedy outputs through a drafter, at a measured verification cost.

Under greedy verification a step's outcome depends only on the draft and the target's greedy
continuation: the accepted tokens are the longest drafted prefix that the continuation
starts with, and the step then emits one more token. So once a target's greedy outputs are
recorded, any n-gram drafting policy can be scored on many prompts without running the
target again: each step asks the drafter for a draft of the committed context (timed),
counts the accepted prefix, charges the verification cost of that many positions (measured
on the target, `kvspec.decoding.verify_cost`), and tells an adaptive drafter what a real
loop would (`feedback`, or `tree_feedback` for a tree). The step sequence equals what
`speculative_generate` / `tree_generate` do with the same drafter whenever the drafter's
choices do not depend on measured time (tested), and the predicted speed-up is greedy's time
per token over the replayed time per token. Used to choose drafting knobs on held-out prompts
(`python -m kvspec.ngram.replay_cli`), never in place of the speed benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvspec.decoding.cache import common_prefix
from kvspec.decoding.tree import ROOT, DraftTree


@dataclass
class Replay:
    """What a drafter would have done on recorded greedy outputs."""

    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0  # modelled: the cost of each step's positions
    one_step: float = 1.0  # seconds of a one-position forward (a greedy step)

    @property
    def accept_len(self) -> float:
        """Tokens per target forward."""
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def speedup(self) -> float:
        """Greedy's time for these tokens over the replayed drafting + verification time."""
        spent = self.draft_seconds + self.verify_seconds
        return self.tokens * self.one_step / spent if spent else 0.0


def accepted_path(tree: DraftTree, continuation: Sequence[int]) -> int:
    """How deep the greedy continuation runs along the tree's branches."""
    return len(accepted_nodes(tree, continuation))


def accepted_nodes(tree: DraftTree, continuation: Sequence[int]) -> list[int]:
    """The nodes the greedy continuation runs through, from the root down (what
    `verify_tree_greedy` accepts when the target continues with `continuation`)."""
    children: dict[tuple[int, int], int] = {}
    for i, (p, t) in enumerate(zip(tree.parents, tree.tokens, strict=True)):
        children.setdefault((p, t), i)
    node, path = ROOT, []
    while len(path) < len(continuation):
        child = children.get((node, continuation[len(path)]))
        if child is None:
            break
        node = child
        path.append(child)
    return path


def replay(
    drafter: Any,
    runs: Sequence[tuple[Sequence[int], Sequence[int]]],
    costs: Mapping[int, float],
    k: int | None = None,
) -> Replay:
    """Replay (prompt, greedy output) pairs through `drafter`: a chain drafter drafting up to
    `k` tokens a step, or a tree drafter (`propose_tree`) when `k` is None. `costs`: seconds of
    a forward of q positions (q = 1 is a greedy step; an unmeasured q costs the next measured
    one up, or the largest). One drafter serves every run in turn, as in the speed benchmark."""
    if 1 not in costs:
        raise ValueError("costs must include one position (a greedy step)")
    out = Replay(one_step=costs[1])
    measured = sorted(costs)
    for prompt, greedy in runs:
        seq, i = [int(t) for t in prompt], 0
        while i < len(greedy):
            budget = len(greedy) - i - 1
            t0 = time.perf_counter()
            drafted, accepted, tree = _step(drafter, seq, greedy[i:], budget, k)
            out.draft_seconds += time.perf_counter() - t0
            seconds = costs[next((q for q in measured if q > drafted), measured[-1])]
            if tree is not None and hasattr(drafter, "tree_feedback"):
                drafter.tree_feedback(tree, accepted_nodes(tree, greedy[i:]), seconds)
            elif tree is None and hasattr(drafter, "feedback"):
                drafter.feedback(drafted, accepted, seconds)
            seq += greedy[i : i + accepted + 1]
            i += accepted + 1
            out.tokens += accepted + 1
            out.steps += 1
            out.drafted += drafted
            out.verify_seconds += seconds
    return out


def _step(
    drafter: Any, seq: list[int], rest: Sequence[int], budget: int, k: int | None
) -> tuple[int, int, DraftTree | None]:
    """(drafted, accepted, the tree or None for a chain) of one step; nothing is drafted
    past the output's last token."""
    if k is None:
        tree = drafter.propose_tree(seq, budget) if budget > 0 else DraftTree()
        return len(tree.tokens), accepted_path(tree, rest), tree
    width = min(k, budget)
    draft = drafter.propose(seq, width) if width > 0 else None
    tokens = draft.tokens[:width] if draft else []
    return len(tokens), common_prefix(tokens, list(rest)), None  # the accepted drafts
