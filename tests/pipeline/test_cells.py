"""PipeInfer's multibuffered cache: runs in private sequences see exactly what they should, and
copying/removing sequences changes what later runs see as the plain cache would."""

from __future__ import annotations

import pytest
import torch

from kvspec.pipeline import comm
from kvspec.pipeline.cells import CANONICAL, MultiBuffer
from kvspec.pipeline.stage import Stage
from tests.pipeline.test_stage import tiny_llama

SEQ = [5, 9, 2, 33, 7, 7, 41, 3, 12, 60, 1]


def _plain_hidden(tokens: list[int]) -> torch.Tensor:
    """Final hidden states of a plain causal pass over `tokens`.  # (1, T, H)"""
    stage = Stage(tiny_llama(0, 3), range(3), head=True)
    return stage(stage.embed_tokens(tokens))


def _buffer() -> tuple[Stage, MultiBuffer]:
    stage = Stage(tiny_llama(0, 3), range(3), head=True)
    return stage, MultiBuffer(stage)


def test_interleaved_speculative_runs_equal_a_plain_pass() -> None:
    """Canonical run for token 4; speculative run A (tokens 5-7) in partition 2 seeing the
    canonical sequence; run B (8-10) in partition 4 seeing both: every row equals the plain
    pass over the whole sequence, although junk of another partition sits in the cache."""
    stage, buf = _buffer()
    plain = _plain_hidden(SEQ)
    embed = stage.embed_tokens
    buf.run(embed(SEQ[:4]), 0, CANONICAL, CANONICAL)
    buf.run(embed([50, 51]), 4, 8, CANONICAL)  # a rival speculation nobody may see
    rows = [buf.run(embed(SEQ[4:5]), 4, CANONICAL, CANONICAL),
            buf.run(embed(SEQ[5:8]), 5, 2, CANONICAL),
            buf.run(embed(SEQ[8:]), 8, 4, CANONICAL | 2)]  # fmt: skip
    torch.testing.assert_close(torch.cat(rows, dim=1), plain[:, 4:], rtol=0, atol=1e-10)


def test_swap_into_canonical_then_continue() -> None:
    """Accept two of a speculative run's three tokens: copy them to the canonical sequence,
    remove the partition (its third cell is dropped), and a canonical run continuing from the
    accepted tokens equals the plain pass."""
    stage, buf = _buffer()
    embed = stage.embed_tokens
    buf.run(embed(SEQ[:5]), 0, CANONICAL, CANONICAL)
    buf.run(embed([SEQ[5], SEQ[6], 40]), 5, 2, CANONICAL)  # third token rejected
    buf.apply(comm.Message(comm.COPY, a=2, b=CANONICAL, c=5, d=7))
    buf.apply(comm.Message(comm.REMOVE, a=2))
    assert buf.canonical() == list(range(7)) and len(buf.pos) == stage.cached == 7
    out = buf.run(embed(SEQ[7:]), 7, CANONICAL, CANONICAL)
    torch.testing.assert_close(out, _plain_hidden(SEQ)[:, 7:], rtol=0, atol=1e-10)


def test_removing_a_partition_without_copy_leaves_the_canonical_cache() -> None:
    stage, buf = _buffer()
    embed = stage.embed_tokens
    buf.run(embed(SEQ[:6]), 0, CANONICAL, CANONICAL)
    buf.run(embed(SEQ[6:9]), 6, 2, CANONICAL)
    buf.apply(comm.Message(comm.REMOVE, a=2))
    assert buf.pos == list(range(6)) and stage.cached == 6
    out = buf.run(embed(SEQ[6:]), 6, CANONICAL, CANONICAL)
    torch.testing.assert_close(out, _plain_hidden(SEQ)[:, 6:], rtol=0, atol=1e-10)


def test_the_mask_hides_other_partitions_and_later_positions() -> None:
    _, buf = _buffer()
    buf.pos, buf.seqs = [0, 1, 2, 2, 3], [1, 1, 2, 4, 1]
    seen = (buf.mask(2, 2, CANONICAL | 4, torch.float64)[0, 0] == 0).tolist()
    # cells: pos0 (canon), pos1 (canon), pos2 (seq 2: hidden), pos2 (seq 4), pos3 (canon, later)
    assert seen == [[True, True, False, False, False, True, False],
                    [True, True, False, True, False, True, True]]  # fmt: skip


def test_only_cache_transactions_apply() -> None:
    _, buf = _buffer()
    with pytest.raises(ValueError, match="not a cache transaction: RUN"):
        buf.apply(comm.Message(comm.RUN))
