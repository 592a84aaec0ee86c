"""PagedAttention's bookkeeping: block tables read back what was written, forks share blocks
until one writes (copy-on-write), freed blocks are reused; the slot accounting of the
scheduling example's real batch under padded, reserved and block layouts."""

from __future__ import annotations

import pytest

from kvspec.lecture import scheduler as sch
from kvspec.lecture.paged import BlockManager, shared_samples, slot_accounting
from tests.tiny import tiny_llama


def test_a_fork_shares_blocks_until_a_write_copies_the_last_one() -> None:
    m = BlockManager(block_size=4)
    m.add(0, [1, 2, 3, 4, 5, 6])  # blocks [1 2 3 4] [5 6]
    m.fork(0, 1)
    assert m.physical_blocks() == 2 and m.copies == 0
    m.append(1, 70)  # the shared, half-full block is copied before the write
    assert m.copies == 1 and m.physical_blocks() == 3
    m.append(0, 7)  # the original is now only sequence 0's: written in place
    assert m.copies == 1 and m.physical_blocks() == 3
    assert m.tokens(0) == [1, 2, 3, 4, 5, 6, 7] and m.tokens(1) == [1, 2, 3, 4, 5, 6, 70]
    assert m.tables[0][0] == m.tables[1][0]  # the full prompt block stays shared
    m.free(1)
    assert m.physical_blocks() == 2
    m.add(2, [9])  # a freed block is reused
    assert m.physical_blocks() == 3 and max(m.refs) == 2
    with pytest.raises(ValueError, match="exists"):
        m.fork(0, 2)


def test_shared_samples_count_blocks_against_private_copies() -> None:
    prompt, samples = [1, 2, 3, 4, 5], [[6, 7, 8, 9], [10, 11], [12, 13, 14, 15]]
    out = shared_samples(prompt, samples, block_size=4)
    # block [5] is shared three ways: the first two writers copy it, the last owns it alone
    assert out["reads_back_exactly"] and out["copies"] == 2
    last = out["steps"][-1]
    # shared: 1 full prompt block; per sample its copy of [5 ...] (+ 1 more for 8 + 1 tokens)
    assert last["physical_blocks"] == 1 + 2 + 1 + 2
    assert last["private_blocks"] == 3 + 2 + 3
    assert [s["step"] for s in out["steps"]] == [1, 2, 3, 4]


def test_slot_accounting_of_three_layouts() -> None:
    trace = [(10, [(0, 10), (1, 3)]), (11, [(0, 11), (1, 4)])]
    rows = {r["layout"]: r for r in slot_accounting(trace, {0: 20, 1: 8}, block_size=4)}
    padded, reserved, blocks = rows.values()
    assert padded["allocated_slots"] == 20 + 22 and padded["used_slots"] == 13 + 15
    assert reserved["allocated_slots"] == 28 * 2 and reserved["peak_allocated"] == 28
    assert blocks["allocated_slots"] == (12 + 4) + (12 + 4)
    assert blocks["wasted_share"] == pytest.approx(1 - 28 / 32)


def test_the_scheduler_traces_its_cache_width_and_row_lengths() -> None:
    requests = [sch.Request(0, [1, 2, 3], 4), sch.Request(1, [4, 5, 6, 7, 8], 2)]
    _, batch = sch.run(tiny_llama(0), requests, slots=2, policy="static")
    width, rows = batch.kv_trace[0]  # step 1: both rows, prompt + the first token fed
    assert (width, rows) == (6, [(0, 4), (1, 6)])
    assert len(batch.kv_trace) == batch.steps
    assert all(w >= max(n for _, n in r) for w, r in batch.kv_trace)
