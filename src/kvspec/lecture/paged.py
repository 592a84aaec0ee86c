"""PagedAttention's bookkeeping (lecture section 4.2): a KV cache cut into fixed-size blocks,
per-sequence block tables into one pool of physical blocks, reference counts, and the
copy-on-write rule for sequences that share a prefix and then diverge.

`BlockManager` keeps, as the stand-in for each position's keys and values, the token id written
there, so reading a sequence back through its block table checks the bookkeeping. The
accounting of `slot_accounting` replays the scheduling example's real batch (its per-step
trace of cache width and each row's length) under three layouts: the padded batch we ran
(measured tensors), the "previous status quo" of one contiguous reservation per request
(prompt + its maximum new tokens), and blocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BlockManager:
    """Physical blocks of `block_size` positions shared by sequences through block tables."""

    block_size: int
    refs: dict[int, int] = field(default_factory=dict)  # physical block -> reference count
    contents: dict[int, list[int]] = field(default_factory=dict)  # block -> what it holds
    tables: dict[int, list[int]] = field(default_factory=dict)  # sequence -> its blocks
    copies: int = 0  # copy-on-write copies made
    _next: int = 0
    _free: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {self.block_size}")

    def add(self, seq: int, tokens: Sequence[int]) -> None:
        """A new sequence holding `tokens` (a prefilled prompt)."""
        if seq in self.tables:
            raise ValueError(f"sequence {seq} exists")
        self.tables[seq] = []
        for token in tokens:
            self.append(seq, token)

    def fork(self, parent: int, child: int) -> None:
        """`child` shares every block of `parent` (a parallel sample of the same prompt)."""
        if child in self.tables:
            raise ValueError(f"sequence {child} exists")
        self.tables[child] = list(self.tables[parent])
        for block in self.tables[child]:
            self.refs[block] += 1

    def append(self, seq: int, token: int) -> None:
        """Write one position: into the last block if it has room (copied first if shared),
        else into a newly allocated block."""
        table = self.tables[seq]
        if not table or len(self.contents[table[-1]]) == self.block_size:
            table.append(self._allocate([]))
        elif self.refs[table[-1]] > 1:  # copy-on-write
            shared = table[-1]
            self.refs[shared] -= 1
            table[-1] = self._allocate(list(self.contents[shared]))
            self.copies += 1
        self.contents[table[-1]].append(int(token))

    def free(self, seq: int) -> None:
        for block in self.tables.pop(seq):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block], self.contents[block]
                self._free.append(block)

    def tokens(self, seq: int) -> list[int]:
        """What `seq` reads back through its block table."""
        return [t for block in self.tables[seq] for t in self.contents[block]]

    def physical_blocks(self) -> int:
        return len(self.refs)

    def _allocate(self, contents: list[int]) -> int:
        block = self._free.pop() if self._free else self._take_new()
        self.refs[block], self.contents[block] = 1, contents
        return block

    def _take_new(self) -> int:
        self._next += 1
        return self._next - 1


def blocks_for(length: int, block_size: int) -> int:
    return math.ceil(length / block_size)


Trace = Sequence[tuple[int, Sequence[tuple[int, int]]]]


def slot_accounting(
    trace: Trace, reserve: Mapping[int, int], block_size: int
) -> list[dict[str, Any]]:
    """KV slots allocated and used per layout over a batch's steps: `trace` holds per step
    the padded cache's width and each row's (request id, real positions); `reserve` maps a
    request to its contiguous reservation (prompt + its maximum new tokens). Returns one row
    per layout: slots summed over steps, the peak step, and the wasted share."""
    layouts = {
        "padded batch (ours, measured)": lambda width, rid, n: width,
        "contiguous reservation": lambda width, rid, n: reserve[rid],
        f"blocks of {block_size} (PagedAttention)": lambda width, rid, n: (
            blocks_for(n, block_size) * block_size
        ),
    }
    used = [sum(n for _, n in rows) for _, rows in trace]
    out = []
    for name, slots in layouts.items():
        allocated = [sum(slots(width, rid, n) for rid, n in rows) for width, rows in trace]
        out.append({"layout": name, "steps": len(trace), "used_slots": sum(used),
                    "allocated_slots": sum(allocated), "peak_allocated": max(allocated, default=0),
                    "peak_used": max(used, default=0),
                    "wasted_share": 1 - sum(used) / max(1, sum(allocated))})  # fmt: skip
    return out


def shared_samples(
    prompt: Sequence[int], samples: Sequence[Sequence[int]], block_size: int
) -> dict[str, Any]:
    """Parallel samples of one prompt through a `BlockManager`: the prompt prefilled once,
    every sample forked from it, their tokens appended step by step (as a batch decodes).
    Returns the physical blocks per step against one private copy per sample, the copies
    made, and whether every sample reads back its own prompt + tokens."""
    manager = BlockManager(block_size)
    manager.add(0, prompt)
    for i in range(1, len(samples)):
        manager.fork(0, i)
    steps = []
    for t in range(max((len(s) for s in samples), default=0)):
        for i, sample in enumerate(samples):
            if t < len(sample):
                manager.append(i, sample[t])
        private = sum(blocks_for(len(prompt) + min(t + 1, len(s)), block_size) for s in samples)
        steps.append({"step": t + 1, "physical_blocks": manager.physical_blocks(),
                      "private_blocks": private, "copies": manager.copies})  # fmt: skip
    exact = all(manager.tokens(i) == [*prompt, *s] for i, s in enumerate(samples))
    prompt_blocks = blocks_for(len(prompt), block_size)
    return {"steps": steps, "copies": manager.copies, "reads_back_exactly": exact,
            "prompt_tokens": len(prompt), "prompt_blocks": prompt_blocks}  # fmt: skip
