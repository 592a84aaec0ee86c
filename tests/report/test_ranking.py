"""The ranking table: each method over greedy and over the reference, paired per prompt."""

from __future__ import annotations

import pytest

from kvspec.report.ranking import ranking_rows, ranking_table
from kvspec.report.stats import paired_speed_ratio


def _record(method, prompt, n, seconds, forwards, exact=True):
    return {"method": method, "prompt": prompt, "tokens": [1] * n, "seconds": seconds,
            "forwards": forwards, "exact": exact}  # fmt: skip


RECORDS = [
    _record("greedy", "a", 10, 1.0, 10), _record("ours", "a", 10, 0.4, 4),
    _record("ref", "a", 10, 0.5, 5),
    _record("greedy", "b", 20, 2.0, 20), _record("ours", "b", 20, 1.0, 8),
    _record("ref", "b", 20, 0.8, 8),
]  # fmt: skip


def test_rows_pair_the_methods_over_the_prompts():
    ours, ref = ranking_rows(RECORDS, "set", "ref")
    ratio, se = paired_speed_ratio(([10, 20], [0.4, 1.0]), ([10, 20], [0.5, 0.8]))
    assert (ours["vs_ref"], ours["vs_ref_se"]) == pytest.approx((ratio, se))
    assert ours["x_greedy"] == pytest.approx(30 / 1.4 / (30 / 3.0))
    assert ours["tokens_per_forward"] == pytest.approx(30 / 12)
    assert (ours["prompts"], ours["equal_to_greedy"]) == (2, "2 of 2")
    assert (ref["vs_ref"], ref["vs_ref_se"]) == (1.0, 0.0)
    assert ours["widest_tie_where_not"] is None


def test_rows_count_inexact_runs_and_refuse_missing_ones():
    records = [dict(r) for r in RECORDS]
    records[1] |= {"exact": False, "tie_margin": 2e-4}
    ours = ranking_rows(records, "set", "ref")[0]
    assert (ours["equal_to_greedy"], ours["widest_tie_where_not"]) == ("1 of 2", 2e-4)
    with pytest.raises(ValueError, match="ref was not timed"):
        ranking_rows(records[:-1], "set", "ref")


def test_pooled_rows_pair_each_sets_prompts_apart():
    """Two sets with the same prompt names: pooled, they are four prompts, not two."""
    table = ranking_table({"one": RECORDS, "two": RECORDS}, "ref")
    assert list(table["set"]) == ["one", "one", "two", "two", "pooled", "pooled"]
    pooled = table[table["set"] == "pooled"].set_index("method")
    assert pooled.loc["ours", "prompts"] == 4
    ratio, _ = paired_speed_ratio(([10, 20] * 2, [0.4, 1.0] * 2), ([10, 20] * 2, [0.5, 0.8] * 2))
    assert pooled.loc["ours", "vs_ref"] == pytest.approx(ratio)
    assert len(ranking_table({"one": RECORDS}, "ref")) == 2


def test_render_labels_the_sets_and_prints_the_configs_note(tmp_path):
    import json

    from kvspec.report.ranking import render

    runs = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in runs:
        path.write_text(json.dumps({"records": RECORDS}))
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    item = {"sets": {"a": "Set A", "b": "Set B"}, "reference": "ref", "note": "Free of X."}
    render(item, {"runs": [str(p) for p in runs]}, out)
    md = (tmp_path / "t.md").read_text()
    assert "refuses one that does). Free of X." in md
    assert "| Set A | ours |" in md and "| pooled | ours | 4 |" in md
    render(item | {"note": None}, {"runs": [str(p) for p in runs]}, out)
    assert "refuses one that does).\n" in (tmp_path / "t.md").read_text()
