"""Healing stages (Table 3.3) in the ci-scale run: restored students, budgets, report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ..conftest import REPO, planned_jobs, shared_mirror, snakemake

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")
METHODS = ["svd", "transmla", "transmla-pca", "transmla-care"]  # config/ci.yaml
BUDGETS = [256, 768]  # config/ci.yaml care.heal.train.budgets


def test_every_student_has_a_checkpoint_per_budget_at_the_same_cache(ci_run: Path) -> None:
    root = ci_run / "results"
    for method in METHODS:
        for budget in BUDGETS:
            rec = json.loads(
                (root / f"evaluate/target/heal-{method}/tokens-{budget}.json").read_text()
            )
            # ci target: 2 layers, g_h·d_h = 32, rank 16 -> 2·16 numbers per token and layer
            assert rec["kv_cached_per_token"] == 2 * 2 * 16, (method, budget)
            assert rec["kv_save_pct"] == pytest.approx(50.0)
        stats = json.loads((root / f"heal/target/{method}/stats.json").read_text())
        assert stats["budget_steps"] == {"256": 1, "768": 3}


def test_restored_students_load_as_deepseek_v3(ci_run: Path) -> None:
    from transformers import AutoConfig

    from kvspec.care.restore import kv_cache_per_token

    for method in METHODS[1:]:
        cfg = AutoConfig.from_pretrained(ci_run / f"results/heal/target/{method}/tokens-768")
        assert cfg.model_type == "deepseek_v3"
        assert kv_cache_per_token(cfg)["per_layer"] == 32
        # config/ci.yaml care.heal.waterfill is empty (the released CARE code's setting)
        assert getattr(cfg, "kvspec_latent_ranks", None) is None
        # the restoration healing started from is temp(): gone once healed
        assert not (ci_run / f"results/heal/target/init/{method}").exists()
    speed = json.loads((ci_run / "results/convert/target/decode_speed.json").read_text())
    restored = [r for r in speed["rows"] if r["model"].startswith("transmla restored")]
    assert restored and all(r["absorbed"] and r["layout_numbers_per_token"] == 2 * 32
                            for r in restored)  # fmt: skip


def test_curves_start_before_healing_and_end_at_the_last_budget(ci_run: Path) -> None:
    curves = pd.read_csv(ci_run / "results/report/heal_convergence.csv")
    for _, curve in curves.groupby("method"):
        assert curve["tokens"].iloc[0] == 0 and curve["tokens"].iloc[-1] == BUDGETS[-1]
        assert curve["val_ppl"].notna().all() and curve["teacher_val_ppl"].nunique() == 1
    assert set(curves["method"]) == {
        "SVD", "TransMLA", "TransMLA (PCA, released code)", "CARE(E) Init"
    }  # fmt: skip


def test_table_3_3_has_ours_beside_the_paper(ci_run: Path) -> None:
    df = pd.read_csv(ci_run / "results/report/thesis_table_3_3.csv")
    pca = "TransMLA (PCA, released code)"
    assert list(df["method"].unique()) == [
        "GQA (Original)", "SVD", "TransMLA", pca, "CARE(E) Init"
    ]  # fmt: skip
    healed = df[df["method"] != "GQA (Original)"]
    assert len(healed) == 2 * 4
    assert healed["arc (ours)"].notna().all()
    in_paper = healed["method"] != pca  # the thesis has no PCA row
    assert healed.loc[in_paper, "arc (paper)"].notna().all()
    assert healed.loc[~in_paper, "arc (paper)"].isna().all()
    assert healed["tokens (ours)"].tolist() == BUDGETS * 4
    notes = (ci_run / "results/report/thesis_table_3_3.md").read_text()
    assert "Cache convention 'matched': every student caches 2r = 32 numbers" in notes
    assert "Every restoration has one latent rank" in notes
    assert "released CARE code's percdamp damping" in notes
    assert (healed["kv_save_pct (ours)"] == 50.0).all()


def test_a_budget_change_reruns_healing_and_its_restorations(ci_run: Path, tmp_path: Path) -> None:
    """The restorations are temp(): healing rebuilds them (seconds), nothing else reruns (the
    decode-speed job rebuilds its own restoration and does not read them)."""
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["care"]["heal"]["train"]["budgets"] = [256, 512]
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(snakemake(ci_run, "-n", "--configfile", str(edited)))
    assert jobs == {
        "heal_restore": 3,
        "heal_train": 4,
        "evaluate_healed": 8,
        "report_heal_table_3_3": 1,
        "report_heal_convergence": 1,
        "specdecode_mla": 1,  # the MLA target with infini-gram drafting: the last budget's model
        "report_spec_mla": 1,
        "all": 1,
    }


def test_table_3_3_paired_validation(ci_run: Path) -> None:
    """CARE(E) Init against each other initialisation on the same held-out windows."""
    table = pd.read_csv(ci_run / "results/report/thesis_table_3_3_paired.csv")
    others = {"SVD", "TransMLA", "TransMLA (PCA, released code)"}
    assert set(table["comparison"]) == {f"CARE(E) Init vs {o}" for o in others}
    assert sorted(set(table["tokens"])) == [0, *BUDGETS]
    assert (table["nll_diff_se"] > 0).all() and table["windows"].nunique() == 1


def test_ablation_identity_row_equals_pca_and_bounds_hold(ci_run: Path) -> None:
    """config/ci.yaml care.heal.ablation: CARE without shrinkage is TransMLA's PCA restoration
    (the same held-out NLLs before and after healing); the bounded water-filled row keeps
    every layer's latent rank in [r/2, 2r] at the same cache."""
    df = pd.read_csv(ci_run / "results/report/thesis_table_3_3_ablation.csv")
    assert df["variant"].tolist() == ["pca", "care-bounded", "care-none"]  # reference first
    identity = df.set_index("variant").loc["care-none"]
    assert abs(identity["Δnll step 0"]) < 1e-5 and abs(identity["Δnll healed"]) < 1e-5
    run = json.loads((ci_run / "results/heal/target/ablation/care-bounded.json").read_text())
    ranks, lat = run["restoration"]["latent_ranks"], run["restoration"]["kv_lora_rank"]
    assert sum(ranks) == len(ranks) * lat and all(lat / 2 <= r <= 2 * lat for r in ranks)
    assert run["restoration"]["kv_cache"]["per_layer"] == 32 and run["budget"] == 256
