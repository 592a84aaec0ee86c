"""Result path patterns, written once; the plan fills them with `.format(...)`.

The rule files declare the same patterns with wildcards; `tests/plan/test_contract.py` checks
that every path the plan names is a job Snakemake plans.
"""

DATA = "results/data/{dataset}.jsonl"
DATA_META = "results/data/{dataset}.meta.json"
MODEL = "results/models/{model}"
PRETRAIN_CURVE = "results/pretrain/{model}/loss.csv"
PRETRAIN_STATS = "results/pretrain/{model}/stats.json"
PRETRAIN_TOKENS = "results/pretrain/tokens/stats.json"
DISTIL_CURVE = "results/distil/{model}/curve.csv"
DISTIL_STATS = "results/distil/{model}/stats.json"

COVARIANCE = "results/covariance/{model}/{calib}.safetensors"
FACTORS = "results/convert/{model}/factors/{factors}.safetensors"
RANK_PLAN = "results/convert/{model}/ranks/{factors}/{plan}.json"
CONVERTED = "results/convert/{model}/models/{factors}/{plan}"
DECODE_SPEED = "results/convert/{model}/decode_speed.json"
EVALUATION = "results/evaluate/{model}/{variant}.json"

HEAL_INIT = "results/heal/{model}/init/{method}"
HEALED = "results/heal/{model}/{method}/tokens-{budget}"
HEAL_CURVE = "results/heal/{model}/{method}/curve.csv"
HEAL_STATS = "results/heal/{model}/{method}/stats.json"

PROMPTS = "results/generate/prompts.jsonl"
SHARD = "results/generate/{model}/shards/{shard}.jsonl"
RESPONSES = "results/generate/{model}/responses.jsonl"
ARCTIC_SUFFIX = "resources/arctic_suffix"  # Arctic Inference's suffix tree, built here
INDEX = "results/ngram/{model}/{corpus}_{fraction}"
INDEX_STATS = "results/ngram/{model}/{corpus}_{fraction}.json"
ACCEPTANCE = "results/acceptance/{model}/{corpus}_{fraction}/{responder}/{heldout}.csv"
SPEED_RUNS = "results/specdecode/{model}/{bench}/runs.json"
DRAFT_LATENCY = "results/specdecode/{model}/draft_latency.json"
SPEED_SUMMARY = "results/specdecode/{model}/{bench}/summary.csv"
DRAFT_QUALITY = "results/draft_quality/{model}.json"

PAPER = "config/paper_results/{name}.csv"

LECTURE = "results/lecture/{example}.json"
SAMPLING_SWEEP = "results/sampling/sweep.json"
SAMPLING_HUMANEVAL = "results/sampling/humaneval/{method}.json"
SAMPLING_TIMING = "results/sampling/timing.json"
SAMPLING_MATH500 = "results/sampling/math500.json"
PIPELINE_RUNS = "results/pipeline/{model}/runs.json"
PIPELINE_SIMULATED = "results/pipeline/{model}/simulated.json"
