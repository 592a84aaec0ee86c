"""CARE stages in the ci-scale run: outputs, their content, and what a config edit reruns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kvspec.config import validate
from kvspec.plan import Plan, paths

from ..conftest import REPO, planned_jobs, shared_mirror, snakemake
from ..plan.conftest import raw_config

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


@pytest.fixture(scope="module")
def ci_config() -> dict:
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())


def _evals(ci_run: Path, model: str) -> dict[str, dict]:
    root = ci_run / "results" / "evaluate" / model
    return {str(p.relative_to(root))[:-5]: json.loads(p.read_text()) for p in root.rglob("*.json")}


def _values(record: dict) -> dict[str, float]:
    return {c: m["value"] for c, m in record["metrics"].items()}


@pytest.mark.parametrize("model", ["target", "target_alt"])
def test_full_rank_conversions_score_like_the_original(ci_run: Path, model: str) -> None:
    """r = g_h·d_h is an exact reparameterization: same accuracies, same perplexity."""
    evals = _evals(ci_run, model)
    original = _values(evals["original"])
    full = {k: v for k, v in evals.items() if k.endswith("uniform-r32")}
    assert {k.split("/")[0].split("-")[0] for k in full} == {"svd", "asvd"}
    for name, rec in full.items():
        assert rec["kv_save_pct"] == 0.0
        got = _values(rec)
        assert got.keys() == original.keys()
        for col, value in got.items():
            assert value == pytest.approx(original[col], rel=1e-3), (name, col)


def test_low_rank_conversions_save_cache_and_change_scores(ci_run: Path) -> None:
    evals = _evals(ci_run, "target")
    low = {k: v for k, v in evals.items() if "-r4" in k and "svd-none" in k}
    assert low, sorted(evals)
    for rec in low.values():
        assert rec["kv_save_pct"] == pytest.approx(100 * (1 - 4 / 32))
        assert rec["kv_cached_per_token"] == 2 * 2 * 4  # layers · (r_K + r_V)
    original = _values(evals["original"])["wiki"]
    assert any(_values(r)["wiki"] != pytest.approx(original, rel=1e-6) for r in low.values())


def test_converted_model_loads_with_from_pretrained(ci_run: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import kvspec.models.modeling_mla  # noqa: F401

    path = ci_run / "results/convert/target/models/care-alpaca-n16-t32/waterfill-r4"
    model = AutoModelForCausalLM.from_pretrained(path)
    plan = json.loads(
        (ci_run / "results/convert/target/ranks/care-alpaca-n16-t32/waterfill-r4.json").read_text()
    )
    assert model.config.kv_rank_k == plan["ranks_k"] and model.config.kv_rank_v == plan["ranks_v"]
    assert sum(plan["ranks_k"]) + sum(plan["ranks_v"]) == 2 * 2 * 4
    ids = AutoTokenizer.from_pretrained(path)("the cat", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert model.generate(ids, max_new_tokens=4, do_sample=False).shape[1] > ids.shape[1]


def _finite(df: pd.DataFrame, columns: list[str]) -> None:
    ours = df[columns].apply(pd.to_numeric, errors="coerce")
    assert ours.notna().all(axis=None), ours
    assert all(math.isfinite(v) for v in ours.stack())


def test_main_tables(ci_run: Path) -> None:
    for name in ("thesis_table_3_1", "thesis_table_3_2"):
        df = pd.read_csv(ci_run / "results" / "report" / f"{name}.csv", dtype={"kv_save_pct": str})
        ours = df[df["rank (ours)"].notna() | (df["method"] == "GQA (Original)")]
        assert ours["method"].iloc[0] == "GQA (Original)"
        measured = df[pd.to_numeric(df["arc (ours)"], errors="coerce").notna()]
        got = set(zip(measured["method"], measured["kv_save_pct"], strict=True))
        assert got == {("GQA (Original)", "0.00")} | {
            (m, s) for m in ("SVD", "ASVD", "CARE-E") for s in ("87.50", "0.00")
        }
        assert {"arc (paper)", "avg (ours)", "avg (paper)"} <= set(df.columns)
        ppl = "wiki_ppl" if name.endswith("3_1") else "ppl"
        cols = [ppl, "arc", "are", "piqa", "mmlu", "obqa", "wg", "avg"]
        _finite(measured, [f"{c} (ours)" for c in cols])
        assert df["hs (ours)"].isna().all()  # HellaSwag is not in the mirror: noted, not faked
        assert "HellaSwag" in (ci_run / "results" / "report" / f"{name}.md").read_text()
    t31 = pd.read_csv(ci_run / "results/report/thesis_table_3_1.csv", dtype=str)
    assert "6.82" in set(t31["wiki_ppl (paper)"])


def test_decided_rows_are_scored_on_their_own_documents(ci_run: Path, schema: dict) -> None:
    """care.decide reaches lm-eval: the GQA and r = 32 rows of Tables 3.1/3.2 are scored on 12
    ARC-C documents (ci.yaml), every other evaluation on eval.tasks' 10; the notes count both."""
    plan = Plan(validate(raw_config("ci"), schema))
    decided = {paths.evaluation(m, v) for m, v in plan.evaluate.limits}
    assert len(decided) == 8  # 2 models x (GQA, SVD, ASVD, CARE-E)
    sizes = {}
    for model, variant in plan.evaluate.columns:
        file = paths.evaluation(model, variant)
        arc = json.loads((ci_run / file).read_text())["metrics"].get("arc")
        if arc is not None:
            sizes[file] = arc["n"]
            assert arc["n"] == (12 if file in decided else 10), file
    assert decided <= set(sizes) and len(sizes) > len(decided)
    for name in ("thesis_table_3_1", "thesis_table_3_2"):
        md = (ci_run / f"results/report/{name}.md").read_text()
        assert "n=12 (4 rows), n=10 (3 rows)" in md, name


def test_ablation_tables_and_figures(ci_run: Path, ci_config: dict) -> None:
    report = ci_run / "results" / "report"
    t34 = pd.read_csv(report / "thesis_table_3_4.csv", dtype={"kv_save_pct": str})
    measured = t34[t34["rank (ours)"].notna()]
    assert set(measured["calibration"]) == {"ALPACA", "C4"}
    assert measured["mmlu (ours)"].isna().all()  # only the configured columns are compared
    t35 = pd.read_csv(report / "thesis_table_3_5.csv")
    assert set(t35[t35["rank (ours)"].notna()]["strategy"]) == {"CARE-U", "CARE-E"}
    _finite(t35[t35["rank (ours)"].notna()], ["wiki_ppl (ours)", "arc (ours)"])
    f33 = pd.read_csv(report / "thesis_figure_3_3.csv")
    for _, part in f33.groupby("calibration"):
        assert part["allocated"].sum() == 2 * 2 * 8  # budget 2·L·r at r = 0.25·32
    f34 = pd.read_csv(report / "thesis_figure_3_4.csv")
    assert sorted(set(f34[f34["sweep"] == "n_samples"]["n"])) == [8, 16]
    assert sorted(set(f34[f34["sweep"] == "seq_len"]["t"])) == [16, 32]
    f31 = pd.read_csv(report / "thesis_figure_3_1.csv")
    assert len(f31[f31["panel"] == "svgroup"]) == ci_config["care"]["figure_3_1"]["groups"]
    assert set(f31[f31["panel"] == "halve"]["index"]) == {0, 1}
    for item in ("figure_3_1", "figure_3_3", "figure_3_4"):
        assert (report / f"thesis_{item}.png").read_bytes()[:4] == b"\x89PNG"
        assert (report / f"thesis_{item}.pdf").read_bytes()[:4] == b"%PDF"


def test_changing_one_rank_reruns_only_its_jobs(ci_run: Path, tmp_path: Path) -> None:
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["care"]["ranks"]["fractions"] = [0.125, 0.75]  # r = 32 -> 24
    cfg["care"]["decide"]["ranks"]["fractions"] = [0.75]  # decide follows (or the check fails)
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(snakemake(ci_run, "-n", "--configfile", str(edited)))
    per_rank = 3 * 2  # three methods x two models
    assert jobs == {
        "convert_allocate": per_rank,
        "evaluate_lmeval": per_rank,  # each converts its model: no convert_mla job
        "report_care_table_3_1": 1,
        "report_care_table_3_2": 1,
        "all": 1,
    }


def test_bad_care_rank_names_the_key(tmp_path: Path) -> None:
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["care"]["table_3_5"]["ranks"] = {"ranks": [4, 64]}  # g_h·d_h is 32 at ci scale
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    assert "care.table_3_5.ranks" in proc.stdout + proc.stderr


def test_decode_speed_table(ci_run: Path) -> None:
    """GQA vs the CARE-E conversion (r = 4 of 32) vs the restored layout, at each context."""
    table = pd.read_csv(ci_run / "results/report/care_decode_speed.csv")
    assert sorted(set(table["context"])) == [16, 48]
    assert list(table["model"].unique()) == [
        "GQA (original)",
        "MLA care-waterfill r=4",
        "transmla restored (DeepSeek-V3, Table 3.3 rank)",
    ]
    rows = table.set_index(["model", "context"])
    for context in (16, 48):
        assert rows.loc[("GQA (original)", context), "vs_gqa"] == 1.0
        mla = rows.loc[("MLA care-waterfill r=4", context)]
        assert mla["cache_vs_gqa"] == pytest.approx(4 / 32)  # 2·4 of 2·32 numbers per layer
        assert mla["tok_s"] > 0
    assert (ci_run / "benchmarks/convert/target/decode_speed.tsv").is_file()
