"""What each rule's job is told: the one route from the validated config to a stage.

`job_params(plan, rule)` is the rule's `params: job=...` bundle, a function of the job's
wildcards returning the keyword arguments its script hands the stage function. An entry is a
value, a function of the wildcards (the plan's input functions), or a `Wild` pattern filled
with the wildcards. No rule reads `config` itself, so every setting a job depends on is in its
bundle and a config edit reruns exactly the jobs whose bundle changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvspec.config import decode_engines
from kvspec.plan import paths

if TYPE_CHECKING:
    from kvspec.plan import Plan

Bundle = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Wild:
    """A pattern filled with the job's wildcards (e.g. a checkpoint path)."""

    pattern: str


def resolve(entries: Mapping[str, Any], wildcards: Any) -> dict[str, Any]:
    """The bundle of one job: callables called with its wildcards, `Wild` patterns filled."""
    values = dict(wildcards.items()) if hasattr(wildcards, "items") else dict(vars(wildcards))
    out = {}
    for key, value in entries.items():
        if isinstance(value, Wild):
            value = value.pattern.format(**values)
        elif callable(value):
            value = value(wildcards)
        out[key] = value
    return out


def job_params(plan: Plan, rule: str) -> Bundle:
    """The `job` params of `rule`: a function of the job's wildcards."""
    if rule.startswith("lecture_"):
        entries = _lecture(plan, rule.removeprefix("lecture_"))
    else:
        entries = RULES[rule](plan, plan.config)
    return lambda wildcards: resolve(entries, wildcards)


def _run(c: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The run-wide settings a stage takes: device, dtype, seed (a subset by `keys`)."""
    values = {"device": c["resources"]["device"], "dtype": c["resources"]["dtype"],
              "seed": c["seed"]}  # fmt: skip
    return {k: values[k] for k in keys or values}


def _engine(c: Mapping[str, Any]) -> dict[str, str]:
    """The decode engine of jobs that decode with models (`resources.linear`)."""
    return {"linear": c["resources"]["linear"]}


def _drafting(c: Mapping[str, Any]) -> dict[str, str]:
    """The decode engines of jobs that decode with a target and draft models
    (`resources.linear`; `resources.draft_linear`, null: the same)."""
    return decode_engines(c["resources"])


def _model_of(c: Mapping[str, Any], *keys: str) -> Callable[[Any], Any]:
    """The config value at models.<model>.<keys...> of the job's model."""

    def get(wildcards: Any) -> Any:
        node = c["models"][wildcards.model]
        for key in keys:
            node = node[key]
        return node

    return get


# ---- data, models, pretraining ----------------------------------------------------------------
def _data_normalize(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"decl": plan.base.dataset_decl, "mirror": c["data"]["mirror"]}


def _models_fetch(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"hub": _model_of(c, "hub"), **_run(c, "dtype")}


def _models_fetch_packaged(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"gguf": _model_of(c, "gguf"), "packages_dir": Wild(paths.PACKAGES)}


def _models_distil(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"decl": _model_of(c, "distil"), "checkpoint": Wild(paths.DISTIL_STATE),
            "start_layers": plan.base.start_layers, **_run(c)}  # fmt: skip


def _pretrain_corpus(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"kinds": plan.base.pretrain_kinds(),
            "stdlib_bytes": c["pretrain"]["python_stdlib_bytes"]}  # fmt: skip


def _pretrain_tokenizer(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"tokenizer": c["tokenizer"], **_run(c, "seed")}


def _pretrain_tokenize(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"val_fraction": c["pretrain"]["val_fraction"], **_run(c, "seed")}


def _pretrain_train(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"decl": _model_of(c, "pretrain"), "checkpoint": Wild(paths.PRETRAIN_STATE),
            **_run(c, "seed")}  # fmt: skip


# ---- CARE ---------------------------------------------------------------------------------------
def _covariance_collect(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"calib": plan.care.calib_settings, **_run(c)}


def _convert_factorize(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"opts": c["care"]["factorize"], **_run(c, "seed", "dtype")}


def _convert_allocate(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"bounds": c["care"]["waterfill_bounds"]}


def _convert_sensitivity(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"opts": plan.care.sensitivity_opts}


def _convert_decode_speed(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    restored = plan.heal.decode_speed_restoration() if plan.heal else None
    return {"models": plan.care.decode_speed_models(), "settings": c["care"]["decode_speed"],
            "restored": restored, **_run(c), **_engine(c)}  # fmt: skip


def _heal_restore(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"settings": lambda w: plan.heal.restore_settings(w.method),
            "opts": c["care"]["factorize"]}  # fmt: skip


def _heal_ablation(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    heal = c["care"]["heal"]
    restore = {"rank": plan.heal.rank(), "freqfold": heal["freqfold"], "cache": heal["cache"],
               "rope_width": heal["rope_dim"]}  # fmt: skip
    ablation = heal["ablation"]
    train = {**heal["train"], "budgets": [ablation["budget"]],
             "eval_windows": ablation["eval_windows"] or heal["train"]["eval_windows"]}  # fmt: skip
    return {"variant": lambda w: plan.heal.ablation()[w.variant], "restore": restore,
            "opts": c["care"]["factorize"], "kind": plan.heal.kind(), "data_opts": heal["data"],
            "train": train, "state": Wild(paths.HEAL_ABLATION_STATE),
            **_run(c, "seed")}  # fmt: skip


def _heal_train(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    heal = c["care"]["heal"]
    return {"kind": plan.heal.kind(), "data_opts": heal["data"], "train": heal["train"],
            "state": Wild(paths.HEAL_STATE), **_run(c, "seed")}  # fmt: skip


def _evaluate(tasks: str, variant: str) -> Callable[[Plan, Mapping[str, Any]], dict[str, Any]]:
    def bundle(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
        return {"tasks": getattr(plan.evaluate, tasks), "task_dir": plan.task_dir(),
                "settings": plan.evaluate.settings(), "variant": Wild(variant)}  # fmt: skip

    return bundle


# ---- speculative decoding (thesis ch. 4) ------------------------------------------------------
def _generate_prompts(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"heldout": c["spec"]["heldout"], "limit": c["spec"]["prompts"]["limit"],
            **_run(c, "seed")}  # fmt: skip


def _generate_responses(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    from kvspec.plan.resources import need

    gen = c["spec"]["generate"]
    vllm = {"backend": "vllm", "vllm_python": gen["vllm_python"], "vllm_eager": gen["vllm_eager"],
            "tensor_parallel": lambda w: max(1, need(c, "generate_responses", w).gpus)}  # fmt: skip
    return {"fraction": lambda w: gen["models"][w.model], "heldout": plan.spec.gen_heldout,
            "shards": gen["shards"], "max_new_tokens": gen["max_new_tokens"],
            "batch_size": gen["batch_size"], "checkpoint": Wild(paths.SHARD_STATE),
            **(vllm if gen["backend"] == "vllm" else _engine(c)),
            **_run(c, "device", "dtype")}  # fmt: skip


def _ngram_index(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"fraction": plan.spec.index_fraction}


def _specdecode_acceptance(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    spec = c["spec"]
    return {"max_support": spec["index"]["max_support"],
            "temperature": spec["acceptance"]["temperature"],
            "max_tokens": spec["generate"]["max_new_tokens"],
            **_run(c, "device", "dtype")}  # fmt: skip


def _specdecode_speed(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    spec, speed = c["spec"], c["spec"]["speed"]
    return {"methods": plan.spec.speed_methods, "bench": plan.spec.speed_set,
            "decode": spec["decode"], "max_new_tokens": speed["max_new_tokens"],
            "repeats": speed["repeats"], "baseline_repeats": speed["baseline_repeats"],
            "unstable_spread": speed["unstable_spread"], "warmup_tokens": speed["warmup_tokens"],
            "max_support": spec["index"]["max_support"], **_run(c), **_drafting(c)}  # fmt: skip


def _specdecode_mla(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    from kvspec.seeds import derive

    mla, spec = c["spec"]["mla_target"], c["spec"]
    return {"models": plan.spec.mla_models(), "methods": mla["methods"],
            "bench": plan.spec.bench_set(mla["bench"]) | {"n": mla["n"]},
            "contexts": mla["contexts"],
            "max_new_tokens": mla["max_new_tokens"], "decode": spec["decode"],
            "max_support": spec["index"]["max_support"], **_run(c, "device", "dtype"),
            **_engine(c), "seed": derive(c["seed"], "specdecode_mla")}  # fmt: skip


def _moa_batching(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    from kvspec.seeds import derive

    return {"model": plan.moa.target, **plan.moa.batching_settings(),
            **_run(c, "device", "dtype"), **_engine(c),
            "seed": derive(c["seed"], "moa_batching")}  # fmt: skip


def _no_params(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    """Builds of pinned peer releases: nothing in the config shapes them."""
    return {}


def _models_gguf(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"gguf": _model_of(c, "gguf"), "packages_dir": Wild(paths.PACKAGES)}


def _specdecode_draft_latency(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"settings": c["spec"]["latency"], "decode": c["spec"]["decode"], **_run(c, "seed")}


def _specdecode_draft_quality(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"sets": plan.spec.draft_sets(), "settings": c["spec"]["drafts"], **_run(c),
            **_drafting(c)}  # fmt: skip


# ---- the other documents ----------------------------------------------------------------------
def _sampling_pilot(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {**plan.sampling.pilot_job(), "sandbox": c["sandbox"],
            "checkpoint": Wild(paths.SAMPLING_PILOT_STATE), **_run(c), **_engine(c)}  # fmt: skip


def _sampling(kind: str) -> Callable[[Plan, Mapping[str, Any]], dict[str, Any]]:
    def bundle(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
        extra = {"sandbox": c["sandbox"], "checkpoint": Wild(paths.SAMPLING_HUMANEVAL_STATE)}
        extra = extra if kind == "humaneval" else {}  # judges code; journals its samples
        return {**plan.sampling.job(kind), "target": c["sampling"]["target"], **extra,
                **_run(c), **_drafting(c)}  # fmt: skip

    return bundle


def _lecture(plan: Plan, example: str) -> dict[str, Any]:
    return plan.lecture.job(example)


def _pipeline_run(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"sets": plan.pipeline.sets(), "settings": plan.pipeline.settings(),
            "checkpoint": Wild(paths.PIPELINE_STATE), **_run(c, "dtype", "seed"),
            **_drafting(c)}  # fmt: skip


def _pipeline_pair(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    from kvspec.seeds import derive

    def seed(wildcards: Any) -> int:  # the pair's own stream (its calibration's inputs)
        return derive(c["seed"], "pipeline_pair", wildcards.model, wildcards.draft)

    return {"sets": plan.pipeline.sets(), "settings": plan.pipeline.pair_settings(),
            "checkpoint": Wild(paths.PIPELINE_PAIR_STATE), "seed": seed,
            **_run(c, "dtype"), **_drafting(c)}  # fmt: skip


def _pipeline_simulate(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"settings": plan.pipeline.simulate_settings()}


def _moa_train(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    from kvspec.plan.resources import need

    def processes(wildcards: Any) -> int:  # the GPUs the resource model gives the job
        return max(1, need(c, "moa_train", wildcards).gpus)

    return {"drafter": plan.moa.drafter, "train": plan.moa.train_of, "data": plan.moa.data_of,
            "loss": c["moa"]["loss"], "processes": processes, **_run(c),
            "seed": plan.moa.seed_of}  # fmt: skip


def _moa_bench(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"sets": plan.moa.sets, "settings": plan.moa.bench_settings, **_run(c), **_engine(c)}


def _moa_quality(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"quality": c["moa"].get("quality"), "max_new_tokens": c["moa"]["max_new_tokens"],
            "sandbox": c["sandbox"]}  # fmt: skip


def _remote_run(plan: Plan, c: Mapping[str, Any]) -> dict[str, Any]:
    return {"settings": plan.remote.settings, "sandbox": c["sandbox"], **_run(c), **_engine(c)}


RULES: dict[str, Callable[[Plan, Mapping[str, Any]], dict[str, Any]]] = {
    "data_normalize": _data_normalize,
    "models_fetch": _models_fetch,
    "models_fetch_packaged": _models_fetch_packaged,
    "models_distil": _models_distil,
    "pretrain_corpus": _pretrain_corpus,
    "pretrain_tokenizer": _pretrain_tokenizer,
    "pretrain_tokenize": _pretrain_tokenize,
    "pretrain_train": _pretrain_train,
    "covariance_collect": _covariance_collect,
    "convert_factorize": _convert_factorize,
    "convert_sensitivity": _convert_sensitivity,
    "convert_decode_speed": _convert_decode_speed,
    "convert_allocate": _convert_allocate,
    "heal_restore": _heal_restore,
    "heal_train": _heal_train,
    "heal_ablation": _heal_ablation,
    "evaluate_original": _evaluate("original_tasks", paths.VARIANT_ORIGINAL),
    "evaluate_lmeval": _evaluate("converted_tasks", paths.VARIANT_CONVERTED),
    "evaluate_healed": _evaluate("healed_tasks", paths.VARIANT_HEALED),
    "generate_prompts": _generate_prompts,
    "generate_responses": _generate_responses,
    "ngram_index": _ngram_index,
    "specdecode_acceptance": _specdecode_acceptance,
    "specdecode_speed": _specdecode_speed,
    "specdecode_mla": _specdecode_mla,
    "specdecode_arctic_build": _no_params,
    "specdecode_llamacpp_build": _no_params,
    "models_gguf": _models_gguf,
    "specdecode_draft_latency": _specdecode_draft_latency,
    "specdecode_draft_quality": _specdecode_draft_quality,
    "sampling_sweep": _sampling("sweep"),
    "sampling_pilot": _sampling_pilot,
    "sampling_humaneval": _sampling("humaneval"),
    "sampling_timing": _sampling("timing"),
    "sampling_math500": _sampling("math500"),
    "pipeline_run": _pipeline_run,
    "pipeline_simulate": _pipeline_simulate,
    "pipeline_pair": _pipeline_pair,
    "moa_train": _moa_train,
    "moa_bench": _moa_bench,
    "moa_batching": _moa_batching,
    "moa_quality": _moa_quality,
    "remote_run": _remote_run,
}
