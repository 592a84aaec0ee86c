"""The experiment plan at ci, mini and paper scale: counts, closure, edit locality."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from kvspec.config import ConfigError, validate
from kvspec.plan import Plan
from kvspec.plan.names import Converted, Healed, Original

from ..conftest import REPO
from .conftest import SCALES, dag_jobs, edited, outputs_of

# Per-rule job counts of `snakemake -n` at the three scales.
EXPECTED_JOBS = {
    "ci": {"evaluate_lmeval": 21, "evaluate_original": 2, "evaluate_healed": 8,
           "convert_mla": 2, "convert_allocate": 19, "convert_sensitivity": 5,
           "convert_factorize": 9, "covariance_collect": 6, "ngram_index": 5,
           "specdecode_acceptance": 7, "specdecode_speed": 7, "generate_responses": 4,
           "pretrain_train": 2, "models_distil": 2, "specdecode_draft_quality": 1,
           "report_draft_quality": 1, "heal_ablation": 3, "pipeline_pair": 1},
    "config": {"evaluate_lmeval": 44, "evaluate_original": 2, "evaluate_healed": 6,
               "convert_mla": 2, "convert_allocate": 31, "convert_sensitivity": 16,
               "convert_factorize": 12, "covariance_collect": 10, "ngram_index": 8,
               "specdecode_acceptance": 10, "specdecode_speed": 7, "generate_responses": 8,
               "heal_ablation": 9, "pipeline_pair": 1},
    "paper": {"evaluate_lmeval": 81, "evaluate_original": 2, "evaluate_healed": 8,
              "convert_mla": 2, "convert_allocate": 42, "convert_sensitivity": 42,
              "convert_factorize": 17, "covariance_collect": 14, "ngram_index": 10,
              "specdecode_acceptance": 10, "specdecode_speed": 9, "generate_responses": 1024,
              "models_fetch": 9, "pipeline_pair": 2},
}  # fmt: skip
# ci: the draft is distilled (not pretrained) and measured (+ its report table) since issue 11;
# every scale: + the models table (report_models); + the draft latency rule (issue 12);
# every scale: + the transmla-pca restoration (1 restore, 1 heal, 2 healed evaluations);
# every scale: + the decode-speed rule and its report table (issue 13); + the status page;
# + the lecture's six examples and their six report tables (issue 18); + document 004's sweep,
# timing, MATH-500 and one HumanEval job per method, with its ten figures and a table (issue 14)
# mini: Figure 3.4 sweeps two sample counts and two lengths (was three each): 10 jobs fewer;
# HumanEval without the printed variant at mini: one job fewer
# mini: healing without the transmla-pca row (1 restore, 1 heal, 2 healed evaluations fewer)
# every scale: + the pipeline runs and their simulation (document 003, issue 17) and twelve
# report items (runs, simulator validation, Figures 4-8 and 10, Tables I-IV transcribed)
# ci: + a second training run of each of its six Table 5 heads (moa.ablation.repeats: 2)
# mini and paper: + Arctic Inference's suffix-tree build (sd_suffix_decoding in the speed runs)
# every scale: + Spec-Bench's questions (one dataset), document 002's head training (one job per
# drafter: 4 at ci and mini, 5 at paper), its decoding job and five report items (Tables 2, 5,
# 10 measured; Tables 1 and 6 transcribed)
# every scale: + document 002's client-server jobs (remote_run, one per head: 3 at ci, 4 at
# mini, 5 at paper) and their three report items (Tables 3, 4, 7; issue 16)
# every scale: + the lecture's PagedAttention example and its report table (issue 34); ci and
# mini: + the drafting-vocabulary sweep's report table (issue 32; paper: no sweep)
# mini: + llama.cpp's build and the target's GGUF file (Table 4.7's peer rows, issue 33)
# ci and mini: + the Table 3.3 ablation (3 / 9 heal_ablation jobs, one report table; its
# calibration statistics are the healing rows' own; paper: no ablation)
# every scale: + PipeInfer's Figure 9 (one report item; a pipeline_pair job per model pair
# beyond pipeline_run's own: 1 at ci and mini, 2 at paper)
# every scale: + the healed MLA target with infini-gram drafting (specdecode_mla and its table)
# ci and mini: + document 004's HumanEval pilot (sampling_pilot; paper: all 164 problems)
# and MoA's Figure 4 (moa_batching and its figure)
# every scale: evaluate_lmeval converts its model itself; convert_mla saves only the models
# other jobs read (healing's SVD student, the decode-speed conversions): 2 at every scale
# ci: + draft_mid, started from the trained draft, as three-model sampling's intermediary
# every scale: + the ranking's speed jobs (spec.ranking: 2 sets at ci and mini, 1 at paper) and
# its report table
TOTALS = {"ci": 242, "config": 304, "paper": 1408}


@pytest.mark.parametrize("scale", SCALES)
def test_job_counts(dags, scale: str) -> None:
    jobs = dags[scale]
    counts = {rule: len(outs) for rule, outs in jobs.items()}
    assert {r: counts.get(r, 0) for r in EXPECTED_JOBS[scale]} == EXPECTED_JOBS[scale]
    assert sum(counts.values()) == TOTALS[scale]  # rule all included


@pytest.mark.parametrize("scale", SCALES)
def test_every_report_input_is_planned(plans, dags, scale: str) -> None:
    """Closure: each file a report item reads is produced by some planned job (or is a
    transcription of the paper), and every planned evaluation feeds some report item."""
    plan, jobs = plans[scale], dags[scale]
    produced = outputs_of(jobs)
    read = set()
    for item in plan.report_items():
        for group, files in item.inputs.items():
            for f in files:
                if "config/paper_results" in f:
                    continue
                read.add(f)
                assert f in produced, f"{item.rule} reads {f} ({group}), not planned"
    evaluations = {*jobs["evaluate_lmeval"], *jobs["evaluate_original"], *jobs["evaluate_healed"]}
    assert evaluations <= read, f"orphan evaluations: {sorted(evaluations - read)[:3]}"


@pytest.mark.parametrize("scale", SCALES)
def test_every_report_caption_exists(plans, scale: str) -> None:
    """Snakemake's --report fails on a missing caption file, long after the run succeeded."""
    captions = {
        out.caption
        for item in plans[scale].report_items()
        for out in item.outputs.values()
        if out.caption
    }
    missing = sorted(c for c in captions if not (REPO / "workflow/report" / f"{c}.rst").is_file())
    assert not missing, f"report outputs without workflow/report/<caption>.rst: {missing}"


@pytest.mark.parametrize("scale", SCALES)
def test_targets_are_datasets_models_and_report_outputs(plans, configs, scale: str) -> None:
    plan = plans[scale]
    targets = plan.targets()
    assert len(targets) == len(set(targets))
    assert {f"results/data/{d}.jsonl" for d in configs[scale]["data"]["datasets"]} <= set(targets)
    assert "results/report/thesis_table_3_1.csv" in targets
    assert "results/report/thesis_table_4_7.md" in targets


def test_columns_of_each_evaluation(plans) -> None:
    """Tables 3.1/3.2 rows get every column; an ablation-only variant only its table's."""
    plan = plans["config"]
    cols = plan.evaluate.columns
    every = set(plan.config["care"]["columns"])  # mini: the columns with signal, not all tasks
    assert every < set(plan.config["eval"]["tasks"])
    for row in plan.care.table_rows("table_3_1"):
        assert cols[("target", row["variant"])] == every
    only_3_4 = [r["variant"] for r in plan.care.table_3_4_rows() if r["label"] == "c4"]
    assert cols[("target", only_3_4[0])] == set(plan.config["care"]["table_3_4"]["columns"])
    assert cols[("target", Healed("svd", 6144))] == set(plan.config["care"]["heal"]["columns"])
    assert cols[("target", Original())] == every


def test_adding_one_rank_adds_exactly_its_variants(configs, schema, plans) -> None:
    before = plans["ci"]
    after = edited(configs["ci"], schema, "care", "ranks", "fractions", [0.125, 0.5, 1.0])
    new = set(after.evaluate.columns) - set(before.evaluate.columns)
    # one rank x three methods x two table models; nothing removed
    assert len(new) == 6 and set(before.evaluate.columns) <= set(after.evaluate.columns)
    assert {v.plan.value for _, v in new} == {16}  # 0.5 of g_h·d_h = 32
    old, new = dag_jobs(before.config), dag_jobs(after.config)
    grew = {r for r, jobs in new.items() if len(jobs) != len(old[r])}
    assert grew == {"evaluate_lmeval", "convert_allocate"}


def test_alt_ranks_set_table_3_2_alone(configs, schema, plans) -> None:
    """care.alt_ranks gives Table 3.2 its own ranks; Table 3.1 keeps care.ranks; null = same."""
    mini = plans["config"].care
    assert {r["rank"] for r in mini.table_rows("table_3_2")} == {None, 64, 128}  # of 256
    assert {r["rank"] for r in mini.table_rows("table_3_1")} == {None, 12, 24, 48, 96}
    ci = plans["ci"].care
    assert ci.config["care"]["alt_ranks"] is None
    ranks = [{r["rank"] for r in ci.table_rows(t)} for t in ("table_3_1", "table_3_2")]
    assert ranks[0] == ranks[1]
    ci_31 = copy.deepcopy(configs["ci"])  # decide's r = 32 row of Table 3.2 would not exist
    ci_31["care"]["decide"]["tables"] = ["table_3_1"]
    after = edited(ci_31, schema, "care", "alt_ranks", {"ranks": [8]})
    assert {r["rank"] for r in after.care.table_rows("table_3_2")} == {None, 8}
    gone = set(plans["ci"].evaluate.columns) - set(after.evaluate.columns)
    assert gone and {m for m, _ in gone} == {"target_alt"}


def test_changing_a_tables_columns_changes_only_its_evaluations(configs, schema, plans) -> None:
    before = plans["config"]
    after = edited(configs["config"], schema, "care", "table_3_5", "columns", ["wiki", "arc"])
    changed = {k for k in before.evaluate.columns
               if before.evaluate.columns[k] != after.evaluate.columns.get(k)}  # fmt: skip
    assert changed and set(after.evaluate.columns) == set(before.evaluate.columns)
    t35 = {("target", r["variant"]) for r in before.care.table_3_5_rows()}
    assert changed <= t35


def test_decide_scores_its_rows_on_more_documents_and_nothing_else(configs, schema, plans):
    """care.decide: Table 3.1's GQA row and its methods at the decide ranks get the decide
    limits for the listed columns, through the evaluate rules' params; every other column and
    evaluation keeps eval.tasks' limits; off, the same evaluations run at eval.tasks' limits."""
    mini = plans["config"]
    limits = mini.config["care"]["decide"]["limits"]
    tasks = mini.config["eval"]["tasks"]
    decided = {r["variant"] for r in mini.care.table_rows("table_3_1") if r["rank"] in (None, 96)}
    assert len(decided) == 4 and set(limits) == {"are", "piqa"}
    rules = {Original: "evaluate_original", Converted: "evaluate_lmeval", Healed: "evaluate_healed"}
    for model, variant in mini.evaluate.columns:
        wc = SimpleNamespace(model=model, **_wildcards(variant))
        job = mini.params(rules[type(variant)])(wc)
        for col, task in job["tasks"].items():
            own = limits.get(col) if model == "target" and variant in decided else None
            assert task["limit"] == (own or tasks[col]["limit"]), (model, str(variant), col)
    t35 = {(r["label"], r["rank"]): r["variant"] for r in mini.care.table_3_5_rows()}
    shared = ("target", t35[("waterfill", 96)])  # Table 3.5's CARE-E row = Table 3.1's
    assert mini.evaluate.tasks_for(*shared)["are"]["limit"] == limits["are"]
    assert mini.evaluate.tasks_for("target", t35[("uniform", 96)])["are"]["limit"] == 80
    off = edited(configs["config"], schema, "care", "decide", None)
    assert off.evaluate.limits == {} and off.evaluate.columns == mini.evaluate.columns
    ci = plans["ci"]  # both tables: each model's GQA row and its rows at r = 32 (= full)
    assert {(m, v.plan.value if isinstance(v, Converted) else None)
            for m, v in ci.evaluate.limits} == {(m, r) for m in ("target", "target_alt")
                                                for r in (None, 32)}  # fmt: skip


def _wildcards(variant) -> dict[str, str]:
    return variant.wildcards() if isinstance(variant, Converted) else (
        {"method": variant.method, "budget": str(variant.budget)}
        if isinstance(variant, Healed) else {})  # fmt: skip


@pytest.mark.parametrize(
    ("decide", "message"),
    [({"ranks": {"fractions": [0.75]}, "limits": {"are": 9}},
      r"ranks \[144\] of target are not among care.ranks"),
     ({"tables": ["table_3_2"], "ranks": {"fractions": [0.125]}, "limits": {"are": 9}},
      r"ranks \[32\] of target_alt are not among care.alt_ranks"),
     ({"ranks": {"fractions": [0.5]}, "limits": {"mmlu": 9}}, "column 'mmlu' is not among")],
)  # fmt: skip
def test_decide_errors_name_the_key(configs, schema, decide, message) -> None:
    cfg = copy.deepcopy(configs["config"])
    cfg["care"]["decide"] = decide
    with pytest.raises(ConfigError, match=f"'care.decide.*{message}"):
        Plan(validate(cfg, schema))
    cfg["care"] |= {"decide": {**decide, "tables": ["table_3_2"]}, "alt_model": None}
    with pytest.raises(ConfigError, match="'care.decide.tables': table_3_2 needs"):
        Plan(validate(cfg, schema))


def test_rows_mean_what_they_say(plans) -> None:
    """Report params carry each row's meaning, so the renderer never parses paths."""
    item = plans["config"].report_item("report_care_table_3_4")
    row = item.params["rows"][0]
    assert Converted.parse(row["variant"]).factors.calib.label == row["label"]
    assert row["file"] == f"results/evaluate/target/{row['variant']}.json"
    speed = plans["config"].report_item("report_spec_speed")
    assert {r["model"] for r in speed.params["main"]} == {"target"}
    assert speed.params["columns"] == {"humaneval": "humaneval", "sft_coding": "python"}


def test_stages_off_when_absent(configs, schema) -> None:
    cfg = dict(configs["ci"], care=None, spec=None, lecture=None, sampling=None, pipeline=None,
               moa=None, remote=None)  # fmt: skip
    plan = Plan(cfg)
    assert plan.care is None and plan.heal is None and plan.spec is None
    assert plan.lecture is None and plan.sampling is None and plan.pipeline is None
    assert plan.moa is None and plan.remote is None
    assert {i.rule for i in plan.report_items()} == {
        "report_table_2_1", "data_sources", "report_models", "report_pretrain",
        "report_status"}  # fmt: skip


def test_humaneval_jobs_read_the_pilots_selection(plans, dags) -> None:
    """At ci and mini the pass@k jobs take the pilot's result and no task ids (a change to the
    sweep's problems must not rerun them); at paper every problem runs and no pilot is made."""
    for scale in ("ci", "config"):
        plan, jobs = plans[scale].sampling, dags[scale]
        assert jobs["sampling_pilot"] == {"results/sampling/pilot.json": (
            "results/sampling/pilot.json",)}  # fmt: skip
        assert plan.pilot_input() == {"pilot": "results/sampling/pilot.json"}
        assert "task_ids" not in plan.settings("humaneval") and "task_ids" in plan.settings("sweep")
        assert plan.pilot_job()["model"] == "results/models/target"
    assert "sampling_pilot" not in dags["paper"] and plans["paper"].sampling.pilot_input() == {}


def test_distilled_draft_reads_its_teachers_responses(plans, dags) -> None:
    plan, jobs = plans["ci"], dags["ci"]
    assert plan.base.distilled == ["draft", "draft_mid"] and "draft" not in plan.base.pretrained
    assert "draft" not in plan.base.hub_models
    assert jobs["models_distil"] == {f"results/models/{m}": (
        f"results/models/{m}", f"results/distil/{m}/curve.csv",
        f"results/distil/{m}/stats.json") for m in ("draft", "draft_mid")}  # fmt: skip
    inputs = plan.base.distil_inputs(SimpleNamespace(model="draft"))
    sets = ("alpaca", "codealpaca", "sharegpt")
    corpus = {f"corpus_{n}": f"results/data/{n}.jsonl" for n in sets}
    assert inputs == {"teacher": "results/models/target",
                      "responses": "results/generate/target/responses.jsonl", **corpus}  # fmt: skip
    assert set(inputs.values()) <= outputs_of(jobs)
    assert plan.params("models_distil")(SimpleNamespace(model="draft"))["start_layers"] is None


def test_a_draft_started_from_another_waits_for_it(plans, dags) -> None:
    """draft_mid (ci and mini) starts from the trained draft: the draft's model and stats are
    its inputs, and the draft's layers reach the job."""
    for scale in ("ci", "config"):
        plan = plans[scale]
        wildcards = SimpleNamespace(model="draft_mid")
        inputs = plan.base.distil_inputs(wildcards)
        assert inputs["start"] == "results/models/draft"
        assert inputs["start_stats"] == "results/distil/draft/stats.json"
        assert set(inputs.values()) <= outputs_of(dags[scale])
        layers = plan.config["models"]["draft"]["distil"]["layers"]
        assert plan.params("models_distil")(wildcards)["start_layers"] == layers
        rows = {r["model"]: r for r in plan.report_item("report_models").params["rows"]}
        assert rows["draft_mid"]["start"] == "draft" and rows["draft"]["start"] is None


def test_draft_quality_against_the_teacher(plans) -> None:
    spec = plans["ci"].spec
    inputs = spec.draft_quality_inputs(SimpleNamespace(model="draft"))
    assert inputs == {"target": "results/models/target", "draft": "results/models/draft",
                      "prompts_humaneval": "results/data/humaneval.jsonl",
                      "prompts_general": "results/generate/prompts.jsonl"}  # fmt: skip
    assert spec.draft_sets()["general"]["kind"] == "heldout"
    item = plans["ci"].report_item("report_draft_quality")
    assert item.params["rows"] == [{"model": "draft", "target": "target",
                                    "quality": "results/draft_quality/draft.json",
                                    "stats": "results/distil/draft/stats.json"}]  # fmt: skip
    assert plans["config"].spec.drafts == ["draft", "draft_mid"]
    assert plans["paper"].spec.drafts == []  # no spec.drafts block: no jobs, no table


def test_suffix_decoding_needs_its_build_and_the_responses(configs, schema, dags) -> None:
    """Listing sd_suffix_decoding adds the build job once and both inputs to that run only."""
    assert "specdecode_arctic_build" not in dags["ci"]
    cfg = copy.deepcopy(configs["ci"])
    cfg["spec"]["speed"]["runs"]["target"]["methods"].append("sd_suffix_decoding")
    plan = Plan(validate(cfg, schema))
    assert dag_jobs(plan.config)["specdecode_arctic_build"] == {
        "resources/arctic_suffix": ("resources/arctic_suffix",)
    }
    inputs = plan.spec.speed_inputs(SimpleNamespace(model="target", bench="humaneval"))
    assert inputs["arctic_suffix"] == "resources/arctic_suffix"
    assert inputs["responses"] == "results/generate/target/responses.jsonl"
    other = plan.spec.speed_inputs(SimpleNamespace(model="target_alt", bench="humaneval"))
    assert "arctic_suffix" not in other


def test_llama_cpp_rows_need_its_build_and_the_models_gguf_file(configs, schema) -> None:
    """llamacpp_* methods add the llama.cpp build once and the model's GGUF file (mini), and a
    model without a GGUF source (ci's pretrained target) is refused by name."""
    jobs = dag_jobs(configs["config"])
    assert list(jobs["specdecode_llamacpp_build"]) == ["resources/llama_cpp"]
    assert list(jobs["models_gguf"]) == ["results/gguf/target.gguf"]
    plan = Plan(configs["config"])
    inputs = plan.spec.speed_inputs(SimpleNamespace(model="target", bench="humaneval"))
    assert inputs["llama_cpp"] == "resources/llama_cpp"
    assert inputs["gguf"] == "results/gguf/target.gguf"
    other = plan.spec.speed_inputs(SimpleNamespace(model="target_alt", bench="humaneval"))
    assert "gguf" not in other
    assert "specdecode_llamacpp_build" not in dag_jobs(configs["ci"])
    cfg = copy.deepcopy(configs["ci"])
    cfg["spec"]["speed"]["runs"]["target"]["methods"].append("llamacpp_greedy")
    with pytest.raises(ConfigError, match=r"spec\.speed\.runs\.target\.methods.*no models"):
        validate(cfg, schema)


def test_a_distilled_teachers_responses_are_generated(configs, schema) -> None:
    """A teacher other than the spec target gets its responses generated for distillation."""
    cfg = copy.deepcopy(configs["ci"])
    cfg["spec"]["speed"]["runs"]["target_alt"]["methods"] = ["greedy"]  # no response index
    cfg["moa"]["alt"] = None  # no heads trained on its responses
    responses = "results/generate/target_alt/responses.jsonl"
    assert responses not in outputs_of(dag_jobs(validate(cfg, schema)))
    cfg["models"]["draft_alt"] = {
        "distil": dict(cfg["models"]["draft"]["distil"], teacher="target_alt")
    }
    jobs = dag_jobs(validate(cfg, schema))
    assert responses in outputs_of(jobs)
    assert jobs["models_distil"].keys() == {
        "results/models/draft",
        "results/models/draft_mid",
        "results/models/draft_alt",
    }


def test_decode_speed_times_planned_models_only(plans, dags, configs, schema) -> None:
    """The original first, the Table 3.1 conversion at each decode-speed rank; every one is
    produced by some planned job. The first restored method is rebuilt in the job itself from
    the statistics heal_restore reads, so it needs no (temporary) restoration on disk."""
    plan = plans["config"]
    models = plan.care.decode_speed_models()
    assert list(models) == ["GQA (original)", "MLA care-waterfill r=96"]
    assert models["GQA (original)"] == "results/models/target"
    assert set(models.values()) <= outputs_of(dags["config"])
    assert "results/convert/target/decode_speed.json" in dags["config"]["convert_decode_speed"]
    restored = plan.heal.decode_speed_restoration()
    assert restored["label"] == "transmla restored (DeepSeek-V3, Table 3.3 rank)"
    assert restored["stats"] == plan.heal.restore_stats(
        SimpleNamespace(model="target", method="transmla")
    )
    from kvspec.plan.params import RULES

    # config.yaml care.heal: r = 96 of SmolLM2's 192, freqfold 2, one latent rank for all layers
    assert restored["settings"] == {"method": "transmla", "rank": 96, "freqfold": 2,
                                    "cache": "matched", "rope_width": None, "schedule": "uniform",
                                    "shrinkage": "mean_diag", "rank_bounds": None}  # fmt: skip
    heal_restore = RULES["heal_restore"](plan, plan.config)  # the same restoration
    assert restored["settings"] == heal_restore["settings"](SimpleNamespace(method="transmla"))
    assert restored["opts"] == heal_restore["opts"]
    assert plan.decode_speed_inputs() == [*models.values(), restored["source"], restored["stats"]]
    assert not any("/heal/" in p for p in plan.decode_speed_inputs())
    cfg = copy.deepcopy(configs["config"])
    cfg["care"]["decode_speed"] = None
    off = Plan(validate(cfg, schema))
    assert "convert_decode_speed" not in dag_jobs(off.config)
    assert all(i.rule != "report_care_decode_speed" for i in off.report_items())


def test_mla_target_reads_the_healed_row_and_the_targets_index(plans, dags, configs,
                                                             schema) -> None:  # fmt: skip
    """The last healing budget of the configured row, the GQA target's response index and
    acceptance rows (the adaptive method), the benchmark questions; all planned."""
    spec = plans["config"].spec
    inputs = spec.mla_inputs()
    assert inputs["mla"] == "results/heal/target/transmla-care/tokens-18432"
    assert inputs["model"] == "results/models/target"
    assert inputs["index_target"] == "results/ngram/target/responses_1"
    assert "calib_index_target" in inputs  # sd_hybrid_target is adaptive
    assert set(inputs.values()) <= outputs_of(dags["config"]) | {"results/data/humaneval.jsonl"}
    assert list(spec.mla_models().values()) == ["model", "mla"]
    job = plans["config"].params("specdecode_mla")(SimpleNamespace(model="target"))
    assert job["bench"]["n"] == 2 and job["bench"]["kind"] == "code"
    cfg = copy.deepcopy(configs["config"])
    cfg["spec"]["mla_target"] = None
    off = Plan(validate(cfg, schema))
    assert "specdecode_mla" not in dag_jobs(off.config)
    assert all(i.rule != "report_spec_mla" for i in off.report_items())


@pytest.mark.parametrize(
    ("edit", "message"),
    [({"method": "svd"}, r"'spec.mla_target.method': 'svd' is not a restored"),
     ({"bench": "nowhere"}, "'spec.mla_target.bench': 'nowhere' is not in spec.speed.sets"),
     ({"methods": ["sd_draft"]}, "'spec.mla_target.methods': 'sd_draft' is not a chain method"),
     ({"methods": ["sd_infgram_sft"]}, "'sd_infgram_sft' is not a chain method")],
)  # fmt: skip
def test_mla_target_errors_name_the_key(configs, schema, edit, message) -> None:
    from kvspec.config import ConfigError

    cfg = copy.deepcopy(configs["ci"])
    cfg["spec"]["mla_target"] = {**cfg["spec"]["mla_target"], **edit}
    with pytest.raises(ConfigError, match=message):
        Plan(validate(cfg, schema))
    cfg["spec"]["mla_target"], cfg["care"]["heal"] = cfg["spec"]["mla_target"] | {}, None
    with pytest.raises(ConfigError, match="'spec.mla_target': needs care.heal"):
        Plan(validate(cfg, schema))


def test_ranking_sets_time_greedy_and_the_ranking_methods_only(plans, dags, configs,
                                                             schema) -> None:  # fmt: skip
    """The ranking's speed jobs run the speed rule with greedy and the ranking's methods; its
    report is the whole study's and `snakemake ranking`'s, not the thesis's."""
    plan = plans["config"]
    rank = SimpleNamespace(model="target", bench="rankhumaneval")
    methods = ["greedy", "sd_hybrid_target_branches", "sd_suffix_decoding"]
    assert plan.spec.speed_methods(rank) == methods
    job = plan.params("specdecode_speed")(rank)
    assert job["methods"] == methods and job["bench"]["skip"] == 40
    table = SimpleNamespace(model="target", bench="humaneval")
    assert plan.spec.speed_methods(table) == configs["config"]["spec"]["speed"]["runs"]["target"][
        "methods"]  # fmt: skip
    runs = [f"results/specdecode/target/{b}/runs.json" for b in ("rankhumaneval", "rankspecbench")]
    assert plan.report_item("report_spec_ranking").inputs["runs"] == runs
    assert set(runs) <= outputs_of(dags["config"])
    ranked = set(plan.targets("ranking"))
    assert ranked == {"results/report/thesis_ranking.csv", "results/report/thesis_ranking.md"}
    assert ranked <= set(plan.targets()) and not ranked & set(plan.targets("thesis"))
    assert not set(runs) & {f for r in plan.spec.speed_rows(True) for f in r.values()}
    cfg = copy.deepcopy(configs["config"])
    cfg["spec"]["ranking"] = None
    off = Plan(validate(cfg, schema))
    assert "ranking" not in off.documents()
    assert all(i.rule != "report_spec_ranking" for i in off.report_items())


@pytest.mark.parametrize(
    ("edit", "message"),
    [({"methods": ["greedy", "sd_hybrid_target"]}, "'spec.ranking.methods': list the methods"),
     ({"sets": ["nowhere"]}, "'spec.ranking.sets': unknown benchmark set 'nowhere'"),
     ({"sets": ["python"]}, "'python' is a set of the target's run"),
     ({"sets": ["general"]}, None)],
)  # fmt: skip
def test_ranking_errors_name_the_key(configs, schema, edit, message) -> None:
    cfg = copy.deepcopy(configs["ci"])
    cfg["spec"]["ranking"] |= edit
    if message is None:  # a held-out split the target's run does not time
        assert Plan(validate(cfg, schema)).spec.speed_methods(
            SimpleNamespace(model="target", bench="general"))[0] == "greedy"  # fmt: skip
        return
    with pytest.raises(ConfigError, match=message):
        Plan(validate(cfg, schema))


@pytest.mark.parametrize(("skip", "overlaps"), [(None, True), (2, True), (3, False)])
def test_ranking_sets_share_no_prompt_with_table_4_7(configs, schema, skip, overlaps) -> None:
    """ci's Table 4.7 times HumanEval/0-2: a ranking set of HumanEval must start after it."""
    cfg = copy.deepcopy(configs["ci"])
    bench = cfg["spec"]["speed"]["sets"]["rankhumaneval"]
    bench.pop("skip")
    bench |= {"skip": skip} if skip else {}
    if overlaps:
        with pytest.raises(ConfigError, match="'rankhumaneval' shares prompts with 'humaneval'"):
            Plan(validate(cfg, schema))
    else:
        Plan(validate(cfg, schema))


@pytest.mark.parametrize("scale", SCALES)
def test_report_categories_are_plain_rst_text(plans, scale: str) -> None:
    """A colon after a word in a category ("ch. 4: speed") makes reStructuredText read a link
    target, and the HTML report then shows a "Duplicate explicit target name" warning box."""
    for item in plans[scale].report_items():
        assert ":" not in item.category, (item.rule, item.category)


def test_figure_9_reuses_the_main_runs_and_adds_one_job_per_other_pair(plans, configs,
                                                                       schema) -> None:  # fmt: skip

    from kvspec.plan import paths

    plan = plans["config"]
    main = paths.PIPELINE_RUNS.format(model="target")
    mid = paths.PIPELINE_PAIR.format(model="target", draft="draft_mid")
    assert plan.pipeline.pairs() == [("target", "draft", main), ("target", "draft_mid", mid)]
    job = plan.params("pipeline_pair")(SimpleNamespace(model="target", draft="draft_mid"))
    assert job["settings"]["n_stages"] == [3] and job["settings"]["ablations"] == []
    assert job["seed"] != plan.config["seed"]  # the pair's own stream
    assert plan.report_item("report_pipeinfer_figure_9").inputs["result"] == [main, mid]
    cfg = copy.deepcopy(configs["config"])  # a stage count pipeline_run does not run
    cfg["pipeline"]["figure_9"]["n_stages"] = 1
    moved = Plan(validate(cfg, schema)).pipeline
    own = paths.PIPELINE_PAIR.format(model="target", draft="draft")
    assert [path for *_, path in moved.pairs()] == [own, mid]


def test_pipeline_needs_the_spec_blocks_prompt_sets(configs) -> None:
    from kvspec.pipeline.settings import check_pipeline

    with pytest.raises(ConfigError, match="'pipeline': needs the spec block"):
        check_pipeline(dict(configs["ci"], spec=None))


@pytest.mark.parametrize(
    ("edit", "message"),
    [({"strategies": ["iterative", "pipeinfer"]}, "'pipeline.strategies': the simulator"),
     ({"n_stages": [1]}, "'pipeline.n_stages': the simulator measures the link"),
     ({"draft": "nobody"}, "'pipeline.draft': 'nobody' is not a key of models"),
     ({"simulate": {"ablation": {"link": "carrier_pigeon"}}},
      "'pipeline.simulate.ablation.link': 'carrier_pigeon' is neither"),
     ({"simulate": {"constrained_link": "carrier_pigeon"}},
      "'pipeline.simulate.constrained_link': 'carrier_pigeon' is not a key"),
     ({"figure_9": {"pairs": [{"target": "target", "draft": "nobody"}]}},
      r"'pipeline.figure_9.pairs\[0\].draft': 'nobody' is not a key of models"),
     ({"figure_9": {"pairs": [{"target": "draft", "draft": "draft"}]}},
      r"'pipeline.figure_9.pairs\[0\]': the draft is the target"),
     ({"figure_9": {"pairs": [{"target": "target", "draft": "draft"}] * 2}},
      r"'pipeline.figure_9.pairs\[1\]': \('target', 'draft'\) listed twice")],
)  # fmt: skip
def test_pipeline_block_errors_name_the_key(configs, schema, edit, message) -> None:
    from kvspec.config import ConfigError

    cfg = copy.deepcopy(configs["ci"])
    cfg["pipeline"] = {**cfg["pipeline"], **edit}
    with pytest.raises(ConfigError, match=message):
        Plan(validate(cfg, schema))


@pytest.mark.parametrize(
    ("edit", "message"),
    [({"ablation": {"set": "nowhere", "drafters": {"x": {"kind": "eagle"}}}},
      "'moa.ablation.set': 'nowhere' is not a set"),
     ({"ablation": {"set": "humaneval", "drafters": {"ours": {"kind": "eagle"}}}},
      r"'moa.ablation.drafters': \['ours'\] are main drafters"),
     ({"quality": {"sets": {"gsm8k": "nowhere"}}}, "'moa.quality.sets.gsm8k'"),
     ({"alt": {"target": "target", "drafters": ["ours"]}}, "'moa.alt.target'"),
     ({"alt": {"target": "draft", "drafters": ["ours"]}}, "has no responses to train on"),
     ({"alt": {"target": "target_alt", "drafters": ["ghost"]}},
      r"'moa.alt.drafters': \['ghost'\] are not main drafters"),
     ({"alt": {"target": "target_alt", "drafters": ["ours"], "train": {"step": 3}}},
      r"'moa.alt.train': \['step'\] are not keys of moa.train"),
     ({"chain_sets": ["nowhere"]}, r"'moa.chain_sets': \['nowhere'\] are not sets"),
     ({"data": {"state_depth": 0}},
      r"'moa.data.state_depth': 0 is below the TLI of \['ours_tli1'\]"),
     ({"vocab_sweep": {"drafter": "eagle_layers", "sizes": [64]}},
      "'moa.vocab_sweep.drafter': 'eagle_layers' must be a key of moa.drafters"),
     ({"vocab_sweep": {"drafter": "eagle", "sizes": [64]}, "ablation": None},
      "the sweep runs on moa.ablation.set")],
)  # fmt: skip
def test_moa_block_errors_name_the_key(configs, schema, edit, message) -> None:
    from kvspec.config import ConfigError

    cfg = copy.deepcopy(configs["ci"])
    cfg["moa"] = {**cfg["moa"], **edit}
    with pytest.raises(ConfigError, match=message):
        Plan(validate(cfg, schema))


def test_moa_batching_reads_the_targets_heads_and_index(plans, dags, configs, schema) -> None:
    """Figure 4: the target's heads it batches, the requests' prompts, the n-gram index; the
    job's requests are moa.batching.n, not the set's own n."""
    moa = plans["config"].moa
    inputs = moa.batching_inputs()
    assert sorted(k for k in inputs if k.startswith("head_")) == ["head_eagle", "head_ours"]
    assert inputs["index_target"] == "results/ngram/target/responses_1"
    assert set(inputs.values()) <= outputs_of(dags["config"]) | {"results/data/humaneval.jsonl"}
    job = plans["config"].params("moa_batching")(SimpleNamespace(model="target"))
    assert job["bench"]["n"] == 8 and job["slots"] == [1, 2, 4, 8] and job["chain_k"] == 4
    assert "results/moa/target/batching.json" in dags["config"]["moa_batching"]
    cfg = copy.deepcopy(configs["config"])
    cfg["moa"]["batching"] = None
    off = Plan(validate(cfg, schema))
    assert "moa_batching" not in dag_jobs(off.config)


@pytest.mark.parametrize(
    ("edit", "message"),
    [({"set": "nowhere"}, "'moa.batching.set': 'nowhere' is not a set"),
     ({"drafters": ["ghost"]}, r"'moa.batching.drafters': \['ghost'\] are not main drafters"),
     ({"baselines": ["sd_draft"]}, r"'moa.batching.baselines': \['sd_draft'\] are not chain")],
)  # fmt: skip
def test_moa_batching_errors_name_the_key(configs, schema, edit, message) -> None:
    from kvspec.config import ConfigError

    cfg = copy.deepcopy(configs["ci"])
    cfg["moa"]["batching"] = {**cfg["moa"]["batching"], **edit}
    with pytest.raises(ConfigError, match=message):
        Plan(validate(cfg, schema))


def test_moa_repeats_retrain_every_table_5_head_under_its_own_seed(configs, schema) -> None:
    """moa.ablation.repeats R: every head of the target again as repeats 1 .. R-1, trained
    from its own declaration under a seed split from the run's, decoded with the ablation
    heads; repeat 0 keeps the run's seed and path; the second target gets no repeats."""
    cfg = copy.deepcopy(configs["ci"])
    cfg["moa"]["ablation"]["repeats"] = 3
    plan = Plan(validate(cfg, schema))
    moa = plan.moa
    names = list(moa.declarations())
    assert moa.drafters_of(moa.target) == [*names, *(f"{d}.repeat{r}" for r in (1, 2)
                                                     for d in names)]  # fmt: skip
    assert moa.drafters_of(moa.alt["target"]) == list(moa.alt["drafters"])
    job = plan.params("moa_train")
    seeds = {r: job(SimpleNamespace(model="target", drafter=d))["seed"]
             for r, d in enumerate(["eagle", "eagle.repeat1", "eagle.repeat2"])}  # fmt: skip
    assert seeds[0] == cfg["seed"] and len(set(seeds.values())) == 3
    assert (
        job(SimpleNamespace(model="target", drafter="eagle.repeat1"))["drafter"]
        == job(SimpleNamespace(model="target", drafter="eagle"))["drafter"]
    )
    settings = moa.bench_settings(SimpleNamespace(model="target"))
    assert settings["ablations"][-1] == f"{names[-1]}.repeat2"
    assert settings["drafters"] == list(moa.moa["drafters"])  # trees: the heads read by tables
    inputs = moa.bench_inputs(SimpleNamespace(model="target"))
    assert inputs["head_ours.repeat2"] == "results/moa/target/heads/ours.repeat2.pt"
    assert "results/moa/target/heads/ours.repeat2.pt" in dag_jobs(plan.config)["moa_train"]
    assert (
        next(i for i in plan.report_items() if i.rule == "report_moa_table_5").params["repeats"]
        == 3
    )


def test_moa_alt_target_gets_its_heads_job_and_capped_sets(plans) -> None:
    moa = plans["config"].moa
    alt = moa.alt["target"]
    assert moa.models() == ["target", alt]
    assert moa.drafters_of(alt) == list(moa.alt["drafters"])
    assert f"results/moa/{alt}/heads/eagle.pt" in moa.heads()
    assert "results/moa/target/heads/eagle_layers.pt" in moa.heads()  # an ablation head
    capped = moa.sets(SimpleNamespace(model=alt))
    assert {s["n"] for s in capped.values()} == {moa.alt["n"]}
    uncapped = moa.moa["sets"]["humaneval"]["n"]
    assert uncapped != moa.alt["n"]  # else the next line could not tell capped from not
    assert moa.sets(SimpleNamespace(model="target"))["humaneval"]["n"] == uncapped
    assert moa.bench_settings(SimpleNamespace(model="target"))["vocab_sweep"]["drafter"]
    settings = moa.bench_settings(SimpleNamespace(model=alt))
    assert settings["vocab_sweep"] is None  # the sweep decodes the main target only
    assert settings["ablations"] == [] and settings["drafters"] == moa.alt["drafters"]
    main, second = SimpleNamespace(model="target"), SimpleNamespace(model=alt)
    assert moa.train_of(main) == moa.moa["train"]
    assert moa.train_of(second) == {**moa.moa["train"], **moa.alt["train"]} != moa.train_of(main)
    assert moa.data_of(second)["state_cache"] == f"results/moa/{alt}/states"
    assert moa.data_of(main) == {**moa.moa["data"], "state_cache": "results/moa/target/states"}
    assert moa.data_of(second) == {**moa.moa["data"], **moa.alt["data"],
                                   "state_cache": f"results/moa/{alt}/states"}  # fmt: skip


def test_moa_heads_cache_the_targets_states_except_at_paper_scale(plans) -> None:
    """~164 KB per token of Llama-3-8B: the paper scale computes states in every step."""
    main = SimpleNamespace(model="target")
    assert plans["config"].moa.data_of(main)["cache_states"] is True
    assert plans["ci"].moa.data_of(main)["cache_states"] is True
    assert plans["paper"].moa.data_of(main)["cache_states"] is False


def test_generate_responses_goes_to_vllm_as_configured(configs, schema) -> None:
    """The paper scale generates with vLLM (its environment's python, tensor parallel over the
    resource model's GPUs, compiled unless `vllm_eager`); the CPU scales with HF generate."""
    wc = SimpleNamespace(model="target", shard="0")
    job = Plan(configs["paper"]).params("generate_responses")(wc)
    assert job["backend"] == "vllm" and job["vllm_python"] == ".venv-vllm/bin/python"
    assert job["vllm_eager"] is False and job["tensor_parallel"] >= 1
    cfg = copy.deepcopy(configs["paper"])
    cfg["spec"]["generate"]["vllm_eager"] = True
    assert Plan(validate(cfg, schema)).params("generate_responses")(wc)["vllm_eager"] is True
    mini = Plan(configs["config"]).params("generate_responses")(wc)
    assert "backend" not in mini and "vllm_eager" not in mini
    # HF generate decodes in the study's engine; vLLM brings its own kernels
    assert mini["linear"] == configs["config"]["resources"]["linear"] == "packed"
    assert "linear" not in job


DECODING = ["specdecode_speed", "specdecode_mla", "specdecode_draft_quality",
            "convert_decode_speed", "sampling_sweep", "sampling_pilot", "sampling_humaneval",
            "sampling_timing", "sampling_math500", "pipeline_run", "pipeline_pair", "moa_bench",
            "moa_batching", "remote_run"]  # fmt: skip


def test_decoding_jobs_take_the_decode_engine_and_training_jobs_do_not(plans) -> None:
    from kvspec.plan.params import RULES

    for plan in plans.values():
        engine = plan.config["resources"]["linear"]
        for rule in DECODING:
            if rule == "sampling_pilot" and not plan.config["sampling"]["pilot"]:
                continue  # no pilot at this scale
            assert RULES[rule](plan, plan.config)["linear"] == engine, rule
        for rule in ("models_distil", "heal_train", "moa_train", "covariance_collect"):
            assert "linear" not in RULES[rule](plan, plan.config), rule
        lecture = {ex: plan.lecture.job(ex).get("linear") for ex in plan.config["lecture"]}
        assert {ex for ex, e in lecture.items() if e == engine} >= {"speculative", "batching"}
        assert lecture.get("quantization") is None  # it quantizes the weights it loads
    assert plans["config"].config["resources"]["linear"] == "packed"
    assert plans["paper"].config["resources"]["linear"] == "torch"


def test_evaluate_jobs_load_models_in_eval_dtype_and_conversions_do_not(plans) -> None:
    from kvspec.plan.params import RULES

    for name, plan in plans.items():
        c = plan.config
        want = c["eval"]["dtype"] or c["resources"]["dtype"]
        for rule in ("evaluate_original", "evaluate_lmeval", "evaluate_healed"):
            assert RULES[rule](plan, c)["settings"]["dtype"] == want, (name, rule)
        for rule in ("covariance_collect",):
            assert RULES[rule](plan, c)["dtype"] == c["resources"]["dtype"], (name, rule)
        quantization = plan.lecture.job("quantization")["eval_settings"]
        assert quantization["dtype"] == c["resources"]["dtype"], name  # it quantizes weights
    assert plans["config"].config["eval"]["dtype"] == "auto"  # decided by the job's machine
    assert plans["config"].config["resources"]["dtype"] == "float32"
    assert plans["ci"].config["eval"]["dtype"] is None


DRAFTING = ["specdecode_speed", "specdecode_draft_quality", "sampling_sweep",
            "sampling_humaneval", "sampling_timing", "sampling_math500", "pipeline_run",
            "pipeline_pair"]  # fmt: skip


def test_jobs_with_drafts_take_the_drafts_engine_and_no_other_job_does(plans) -> None:
    from kvspec.plan.params import RULES

    for name, plan in plans.items():
        resources = plan.config["resources"]
        want = resources.get("draft_linear") or resources["linear"]
        for rule in DRAFTING:
            assert RULES[rule](plan, plan.config)["draft_linear"] == want, (name, rule)
        for rule in set(DECODING) - set(DRAFTING):
            if rule == "sampling_pilot" and not plan.config["sampling"]["pilot"]:
                continue
            assert "draft_linear" not in RULES[rule](plan, plan.config), (name, rule)
        assert plan.lecture.job("speculative")["draft_linear"] == want
    assert plans["config"].config["resources"]["draft_linear"] == "packed-int8"
    paper = plans["paper"]
    assert RULES["specdecode_speed"](paper, paper.config)["draft_linear"] == "torch"
