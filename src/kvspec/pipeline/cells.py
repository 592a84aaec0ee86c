"""PipeInfer's pipelined KV-cache multibuffering on one stage (document 003, section IV-C).

The stage's cache holds cells in the order runs arrived; like llama.cpp's cache, each cell
carries metadata: the token position it encodes and the set of sequences it belongs to (a
bitmask: bit 0 is the canonical sequence, the others are the private partitions of in-flight
speculative runs). A run attends to the cells of the sequences it is allowed to see (its
`visible` mask) at positions before each of its tokens, plus its own earlier tokens; copying
cells to another sequence and removing a sequence change only the metadata, and cells that
no sequence holds any more are dropped from the cache.
"""

from __future__ import annotations

import torch

from kvspec.decoding.cache import keep_positions
from kvspec.decoding.tree import bool_to_additive
from kvspec.pipeline import comm
from kvspec.pipeline.stage import Stage

CANONICAL = 1  # bit of sequence 0


class MultiBuffer:
    """The cache of `stage` as cells with positions and sequence membership."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.pos: list[int] = []  # token position of each cached cell
        self.seqs: list[int] = []  # bitmask of the sequences holding each cell

    def run(self, hidden: torch.Tensor, p0: int, seq: int, visible: int) -> torch.Tensor:
        """Run `hidden` (1, n, H), tokens at positions p0 .. p0+n-1 of sequence bit `seq`,
        seeing the cells of the sequences in `visible`; their cells join `seq`."""
        n = hidden.shape[1]
        positions = torch.arange(p0, p0 + n)[None]  # (1, n)
        out = self.stage(hidden, positions, self.mask(p0, n, visible, hidden.dtype))
        self.pos += range(p0, p0 + n)
        self.seqs += [seq] * n
        return out

    def mask(self, p0: int, n: int, visible: int, dtype: torch.dtype) -> torch.Tensor:
        """(1, 1, n, cells + n) additive mask: token i sees visible cells before its position
        and the run's tokens up to itself."""
        pos = torch.tensor(self.pos, dtype=torch.long)  # (C,)
        member = (torch.tensor(self.seqs, dtype=torch.long) & visible) != 0  # (C,)
        query = torch.arange(p0, p0 + n)  # (n,)
        old = member[None, :] & (pos[None, :] < query[:, None])  # (n, C)
        new = torch.ones(n, n, dtype=torch.bool).tril()  # (n, n)
        return bool_to_additive(torch.cat([old, new], dim=1), dtype)

    def copy(self, src: int, dst: int, start: int, end: int) -> None:
        """Add sequence `dst` to the cells of `src` at positions [start, end)."""
        for i, (p, s) in enumerate(zip(self.pos, self.seqs, strict=True)):
            if s & src and start <= p < end:
                self.seqs[i] = s | dst

    def remove(self, seq: int) -> None:
        """Take sequence `seq` off every cell; drop the cells no sequence holds."""
        self.seqs = [s & ~seq for s in self.seqs]
        keep = [i for i, s in enumerate(self.seqs) if s]
        if len(keep) < len(self.seqs):
            keep_positions(self.stage.cache, keep)
            self.pos = [self.pos[i] for i in keep]
            self.seqs = [self.seqs[i] for i in keep]

    def apply(self, msg: comm.Message) -> None:
        """Carry out a COPY or REMOVE transaction."""
        if msg.kind == comm.COPY:
            self.copy(msg.a, msg.b, msg.c, msg.d)
        elif msg.kind == comm.REMOVE:
            self.remove(msg.a)
        else:
            raise ValueError(f"not a cache transaction: {comm.KINDS.get(msg.kind, msg.kind)}")

    def canonical(self) -> list[int]:
        """Positions held by the canonical sequence, in cache order (tests)."""
        return [p for p, s in zip(self.pos, self.seqs, strict=True) if s & CANONICAL]
