"""TV-based acceptance, binning helpers, and per-position records from a real index."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.ngram.acceptance import PositionRecord, position_records, tv_acceptance
from kvspec.ngram.drafters import InfiniGramDrafter
from kvspec.ngram.index import build_index, open_engine

from ..tiny import tiny_llama
from .acceptance_oracle import (
    acceptance_by_confidence,
    acceptance_by_match_length,
    expected_accepted_tokens,
    match_hit_rates,
)
from .sparse_vocab import LARGE_VOCAB, build_twin


def _dense(d: dict[int, float], vocab: int = 6) -> torch.Tensor:
    v = torch.zeros(vocab, dtype=torch.float64)
    for t, p in d.items():
        v[t] = p
    return v


@pytest.mark.parametrize("as_dense", [(True, True), (True, False), (False, True), (False, False)])
def test_tv_acceptance_extremes_and_mixed_forms(as_dense):
    p, q, r = {0: 0.5, 2: 0.5}, {1: 0.25, 3: 0.75}, {0: 0.25, 1: 0.25, 2: 0.5}
    cast = [(_dense if dense else dict) for dense in as_dense]
    assert tv_acceptance(cast[0](p), cast[1](p)) == pytest.approx(1.0)
    assert tv_acceptance(cast[0](p), cast[1](q)) == pytest.approx(0.0)
    assert tv_acceptance(cast[0](p), cast[1](r)) == pytest.approx(0.75)  # sum of min(p, r)


@pytest.mark.parametrize("dense_p", [True, False])
def test_empty_draft_distribution_accepts_nothing(dense_p):
    p = {0: 0.5, 2: 0.5}
    assert tv_acceptance(_dense(p) if dense_p else p, {}) == 0.0


def test_row_separates_target_confidence_from_ngram_quality():
    from kvspec.ngram.acceptance import position_row

    p = {0: 0.1, 2: 0.6, 3: 0.3}
    row = position_row(_record(2, p, {3: 0.75, 2: 0.25}, suffix_len=4))
    assert row["p_top1"] == pytest.approx(0.6)  # the target is fairly sure of token 2
    assert row["p_q_mode"] == pytest.approx(0.3)  # the n-gram's mode is 3
    assert row["hit"] == 0 and row["acceptance"] == pytest.approx(0.25 + 0.3)
    assert position_row(_record(2, p, {2: 1.0}, suffix_len=4))["hit"] == 1
    empty = position_row(_record(2, p, {}, suffix_len=0))
    assert (empty["hit"], empty["p_q_mode"], empty["acceptance"]) == (0, 0.0, 0.0)


def _record(token, p, q, suffix_len, count=1):
    return PositionRecord(token, _dense(p), q, suffix_len, count)


RECORDS = [
    _record(0, {0: 1.0}, {0: 1.0}, 0),  # acceptance 1, confident, hit
    _record(1, {1: 1.0}, {1: 0.55, 2: 0.45}, 4),  # 0.55, hit
    _record(2, {2: 1.0}, {3: 1.0}, 8),  # 0, miss
    _record(3, {3: 1.0}, {3: 0.4, 4: 0.3, 5: 0.3}, 16),  # 0.4, hit but unconfident
]


def test_acceptance_by_match_length():
    bins = acceptance_by_match_length(RECORDS, bins=(0, 4, 8, 16, 20))
    assert bins[0]["acceptance"] == pytest.approx((1 + 0.55 + 0 + 0.4) / 4)
    assert bins[8]["acceptance"] == pytest.approx(0.2)
    assert bins[16] == {"acceptance": pytest.approx(0.4), "n": 1, "coverage": 0.25}
    assert bins[20]["n"] == 0 and np.isnan(bins[20]["acceptance"])


def test_acceptance_by_confidence():
    out = acceptance_by_confidence(RECORDS)
    assert list(out) == ["all", ">0.5", ">0.6", ">0.7"]
    assert out["all"]["n"] == 4
    assert out[">0.5"]["acceptance"] == pytest.approx((1 + 0.55 + 0) / 3)
    assert out[">0.6"]["acceptance"] == pytest.approx(0.5)


def test_match_hit_rates():
    assert match_hit_rates(RECORDS) == {0: 1.0, 4: 0.75, 8: 0.5, 16: 0.25}


def test_expected_accepted_tokens_replays_speculation():
    # hits: T T F T -> accept 2 then miss at 2; position 3 is the last token, produced by
    # the target with nothing left to draft (0 accepted).
    assert expected_accepted_tokens(RECORDS, k=4) == pytest.approx(1.0)
    # k=1: accept 0 (1 hit), pos 2: miss -> 0, pos 3 -> last token, 0 drafts.
    assert expected_accepted_tokens(RECORDS, k=1) == pytest.approx((1 + 0 + 0) / 3)
    # a confidence cut-off of 0.6 turns position 1 into a miss
    assert expected_accepted_tokens(RECORDS, k=4, confidence=0.6) == pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    target = tiny_llama(0)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 63, 5).tolist() for _ in range(6)]
    outputs = [greedy_generate(target, p, 20) for p in prompts]
    docs = [p + o[:12] for p, o in zip(prompts[:3], outputs[:3], strict=True)]
    docs += [rng.integers(0, 63, 25).tolist() for _ in range(10)]
    path = tmp_path_factory.mktemp("acc") / "idx"
    build_index(docs, path, vocab_size=64, eos_token_id=63)
    return target, open_engine(path, 64, 63), prompts, outputs


def test_position_records_match_engine(setup):
    target, engine, prompts, outputs = setup
    records = position_records(target, engine, prompts[0], outputs[0])
    assert [r.token for r in records] == outputs[0]
    for i, rec in enumerate(records):
        res = engine.infgram_ntd(prompts[0] + outputs[0][:i])
        assert rec.suffix_len == res["suffix_len"] and rec.count == res["prompt_cnt"]
        want = {int(t): r["prob"] for t, r in res["result_by_token_id"].items()}
        assert rec.q == pytest.approx(want)  # counted by the drafter, equal to infgram_ntd
        assert float(rec.p.sum()) == pytest.approx(1.0)
        assert int(torch.argmax(rec.p)) == rec.token  # greedy output
    assert records[0].suffix_len >= 5  # the prompt itself is in the index


def test_expected_accepted_equals_measured_speculation(setup):
    target, engine, prompts, outputs = setup
    drafter = InfiniGramDrafter(engine)
    for prompt, output in zip(prompts, outputs, strict=True):
        records = position_records(target, drafter, prompt, output)
        _, steps = speculative_generate(target, prompt, drafter, len(output), k=4)
        measured = sum(s.accepted for s in steps) / len(steps)
        assert expected_accepted_tokens(records, k=4) == pytest.approx(measured)


def test_acceptance_rows_of_a_target_on_a_second_device_are_the_cpu_s(setup, second_device):
    """The acceptance rule's rows with the target on another device (the paper scale's GPU;
    tests/second_device.py)."""
    import pandas as pd

    from kvspec.ngram.acceptance import acceptance_rows

    target, engine, prompts, outputs = setup
    items = [(str(i), p, o) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    moved = acceptance_rows(tiny_llama(0).to(second_device), engine, items)
    pd.testing.assert_frame_equal(moved, acceptance_rows(target, engine, items), rtol=1e-6)


class _FromReferenceIds(torch.nn.Module):
    """The target fed reference ids: maps them to model ids first, so p stays the same."""

    def __init__(self, target: torch.nn.Module, universe: np.ndarray) -> None:
        super().__init__()
        self.target = target
        self.register_buffer("model_ids", torch.as_tensor(universe, dtype=torch.long))

    @property
    def device(self) -> torch.device:
        return self.target.device

    def forward(self, input_ids: torch.Tensor):
        return self.target(input_ids=self.model_ids[input_ids])


def _in_model_ids(twin, record: PositionRecord) -> PositionRecord:
    """A reference record with its token and q in model ids (where p is defined)."""
    token, q = twin.to_model([record.token])[0], twin.dist_to_model(record.q)
    return PositionRecord(token, record.p, q, record.suffix_len, record.count)


def _fields(record: PositionRecord) -> tuple:
    return record.token, record.q, record.suffix_len, record.count


def test_acceptance_on_compact_vocab_equals_reference(tmp_path):
    from kvspec.ngram.acceptance import acceptance_rows

    twin = build_twin(tmp_path, 21, eos_in_corpus=False)
    target = tiny_llama(0, vocab=LARGE_VOCAB, hidden=16, intermediate=32)
    docs, unseen = twin.docs, twin.unseen
    items = [
        (f"p{i}", docs[i][:3] or [unseen[1]], docs[i][3:12] + [unseen[0]] + docs[i + 1][:5])
        for i in range(4)
    ]
    ref_target = _FromReferenceIds(target, twin.universe)
    ref_frames = []
    for name, prompt, output in items:
        records = position_records(target, twin.compact, prompt, output)
        ref_records = position_records(
            ref_target, twin.reference, twin.to_ref(prompt), twin.to_ref(output)
        )
        mapped = [_in_model_ids(twin, r) for r in ref_records]
        assert [_fields(r) for r in records] == [_fields(r) for r in mapped]
        assert all(torch.equal(a.p, b.p) for a, b in zip(records, mapped, strict=True))
        ref_frames.append(_rows(mapped, name))
    rows = acceptance_rows(target, twin.compact, items)
    ref_rows = pd.concat(ref_frames, ignore_index=True)
    assert rows["count"].min() > 0 and (rows["suffix_len"] == 0).any()  # unseen ids back off
    pd.testing.assert_frame_equal(rows, ref_rows)


# ------------------------------------------------ per-position rows (what the workflow stores)


def _rows(records, prompt="a"):
    import pandas as pd

    from kvspec.ngram.acceptance import position_row

    df = pd.DataFrame([position_row(r) for r in records])
    df.insert(0, "pos", range(len(df)))
    df.insert(0, "prompt", prompt)
    return df


def test_rows_reproduce_the_record_functions():
    from kvspec.ngram.acceptance_stats import (
        acceptance_grid,
        accepted_per_speculation,
        hit_rate_table,
    )

    rows = _rows(RECORDS)
    grid = acceptance_grid(rows, bins=(0, 4, 8, 16), thresholds=(None, 0.5, 0.6))
    by_len = acceptance_by_match_length(RECORDS, bins=(0, 4, 8, 16))
    by_conf = acceptance_by_confidence(RECORDS, thresholds=(None, 0.5, 0.6))
    for _, cell in grid.iterrows():
        if cell["threshold"] == "all":
            assert cell["acceptance"] == pytest.approx(by_len[cell["min_match"]]["acceptance"])
        if cell["min_match"] == 0:
            assert cell["acceptance"] == pytest.approx(by_conf[cell["threshold"]]["acceptance"])
    assert hit_rate_table(rows) == match_hit_rates(RECORDS)
    for k, conf in [(4, 0.0), (1, 0.0), (4, 0.6)]:
        got = accepted_per_speculation(rows, k, 0, conf)["accepted"]
        assert got == pytest.approx(expected_accepted_tokens(RECORDS, k, conf))


def test_accepted_per_speculation_by_min_match_and_prompt():
    import pandas as pd

    from kvspec.ngram.acceptance_stats import accepted_per_speculation

    # min match 4: speculation starts at position 1 (len 4): hit, then miss at 2 -> 1 accepted;
    # position 3 (len 16) is the last token -> 0. Mean (1 + 0) / 2.
    rows = _rows(RECORDS)
    assert accepted_per_speculation(rows, 4, min_match=4)["accepted"] == pytest.approx(0.5)
    assert accepted_per_speculation(rows, 4, min_match=20)["speculations"] == 0
    # Two prompts are replayed separately: no speculation runs across the boundary.
    both = pd.concat([_rows(RECORDS, "a"), _rows(RECORDS, "b")])
    assert accepted_per_speculation(both, 4)["speculations"] == 2 * 2  # (2, 0) per prompt


def test_acceptance_surface_cells():
    from kvspec.ngram.acceptance_stats import acceptance_surface

    rows = _rows(RECORDS)
    rows["count"] = [1000, 100, 10, 1]
    cells = acceptance_surface(rows, max_len=8, freq_bins=3)
    assert cells["n"].sum() == 4 and cells["match_len"].max() == 8  # 16 clipped to 8
    assert cells["acceptance"].between(0, 1).all()
    top = cells[cells["match_len"] == 0]
    assert top["log10_count"].item() == pytest.approx(2.5) and top["acceptance"].item() == 1.0
