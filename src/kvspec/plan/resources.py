"""What each job needs — GPUs, GPU memory, host memory, cores, wall time — computed from the
shape of its model (`kvspec.plan.cards`) and the work the config gives it.

Every assumption is stated once, here: the node (`NODE`: 8 × 80 GB GPUs, as on the H100
nodes the documents used) and the fraction of peak each kind of work reaches (`RATES`).
Memory is counted from weights, KV cache, activations and optimizer state; time from
floating-point work at the stated efficiency, or from streaming the weights once per decode
step (batch-1 decoding is memory-bound). The rules take `resources:` from `need(...)` and the
Slurm profile only maps the job classes ("gpu", "cpu") to site partitions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvspec.config import eval_dtype
from kvspec.plan.cards import Card, card_of
from kvspec.plan.sampling import HUMANEVAL_SIZE, humaneval_bound
from kvspec.plan.spec import run_methods

GB = 1024**3
# "auto" (eval.dtype) is bfloat16 or float32 by the machine that runs the job: sized as float32
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "auto": 4}


@dataclass(frozen=True)
class Node:
    """A cluster node of the paper scale."""

    gpus: int = 8
    gpu_gb: float = 80.0  # H100 80GB
    host_gb: float = 512.0
    cpus: int = 64
    hbm_gb_s: float = 3350.0  # GPU memory bandwidth
    gpu_tflops: float = 989.0  # dense bf16
    cpu_gflops: float = 25.0  # per core, float64 linear algebra
    max_hours: float = 72.0  # the longest job the partitions allow


@dataclass(frozen=True)
class Rates:
    """Fraction of peak reached by each kind of work (assumptions)."""

    train: float = 0.35  # model FLOPs utilisation of training (6 FLOPs per parameter-token)
    score: float = 0.5  # prefill / scoring (2 FLOPs per parameter-token)
    decode: float = 0.6  # share of memory bandwidth in batched or batch-1 decoding
    usable_gpu: float = 0.9  # of a GPU's memory (the rest: CUDA context, fragmentation)
    download_gb_s: float = 0.2  # hub downloads
    disk_gb_s: float = 0.5  # reading and writing model files on a cluster's shared file system
    scaling: float = 0.9  # data-parallel efficiency over one node's GPUs


NODE, RATES = Node(), Rates()
CPU_PROCESS_GB = 2.0  # a CPU job's interpreter, torch and tokenizer (mini runs: 0.6-2.9 GB RSS)


@dataclass(frozen=True)
class Need:
    """One job's resources; `gpu_gb` is per GPU. `exclusive`: a timed job holds its node."""

    gpus: int
    gpu_gb: float
    host_gb: float
    cpus: int
    hours: float
    nodes: int = 1
    exclusive: bool = False
    tasks: int = 1  # processes started by srun in the allocation (multi-node jobs)

    @property
    def job_class(self) -> str:
        return "gpu" if self.gpus else "cpu"

    def resources(self) -> dict[str, Any]:
        """Snakemake resources: memory with 25% headroom, wall time x1.5 (at least 30 min),
        GPUs and the memory each needs, cores (the Slurm plugin's cpus_per_task) and nodes."""
        return {"mem_mb": int(math.ceil(self.host_gb * 1.25 * 1024)),
                "runtime": int(max(30, math.ceil(self.hours * 60 * 1.5))),
                "gpu": self.gpus, "gpu_mem_mb": int(math.ceil(self.gpu_gb * 1024)),
                "cpus_per_task": self.cpus, "nodes": self.nodes, "tasks": self.tasks}  # fmt: skip


# ---- the parts every estimate is made of -------------------------------------------------------
def weights_gb(card: Card, dtype: str) -> float:
    return card.params * BYTES[dtype] / GB


def kv_gb(card: Card, tokens: int, dtype: str) -> float:
    """KV cache of `tokens` positions in all (sequences × positions)."""
    return card.kv_bytes_per_token * tokens * BYTES[dtype] / GB


def gpus_for(gb: float, node: Node = NODE) -> int:
    """GPUs whose usable memory holds `gb` (tensor/pipeline parallel beyond one)."""
    return max(1, math.ceil(gb / (node.gpu_gb * RATES.usable_gpu)))


def decode_hours(card: Card, dtype: str, steps: float, gpus: int, node: Node = NODE) -> float:
    """Memory-bound decoding: every step streams the weights once."""
    seconds = steps * weights_gb(card, dtype) / (node.hbm_gb_s * RATES.decode * gpus)
    return seconds / 3600


def flops_hours(flops: float, rate: float, gpus: int, node: Node = NODE) -> float:
    return flops / (node.gpu_tflops * 1e12 * rate * gpus) / 3600


def inference(card: Card, dtype: str, *, batch: int, context: int, decode_steps: float,
              score_tokens: float = 0.0, models: int = 1) -> Need:  # fmt: skip
    """A job that loads a model on GPUs, scores `score_tokens` and decodes `decode_steps`
    steps of `batch` sequences of up to `context` positions; `models` such models (each at
    most the card's size) held at once, each with its own cache."""
    act = batch * context * card.hidden * 4 * 8 / GB + batch * card.vocab * 4 / GB  # (B,T,H)s
    held = weights_gb(card, dtype) + kv_gb(card, batch * context, dtype)
    gb = models * held + act + 1.0
    gpus = gpus_for(gb)
    hours = decode_hours(card, dtype, decode_steps, gpus)
    hours += flops_hours(2 * card.params * score_tokens, RATES.score, gpus)
    return Need(gpus, gb / gpus, 1.5 * models * weights_gb(card, dtype) + 16, 8 * gpus, hours)


def on_device(need: Need, device: str) -> Need:
    """The need as the scale runs it: on CPU (mini, ci) what a GPU job holds on its GPUs (the
    model, its cache and activations) lives in host memory instead, beside the process; the
    host-side staging of a GPU job is not needed. The rules' own `threads` give the cores;
    times are not modelled there (a generous limit)."""
    if device != "cpu":
        return need
    host = need.gpu_gb * need.gpus + CPU_PROCESS_GB if need.gpus else need.host_gb
    return Need(0, 0.0, host, 1, min(need.hours, 12.0), need.nodes, need.exclusive,
                need.tasks)  # fmt: skip


# ---- per rule ----------------------------------------------------------------------------------
Estimate = Callable[[Mapping[str, Any], Any], Need]
# rules that time something: they hold their node alone (locally: every core, `threads:
# workflow.cores`; under Slurm: --exclusive), so that no other job shares the machine
TIMED = frozenset({"convert_decode_speed", "specdecode_speed", "specdecode_mla",
                   "specdecode_draft_quality", "specdecode_draft_latency", "sampling_sweep",
                   "sampling_timing", "moa_bench", "moa_batching", "remote_run", "pipeline_run",
                   "pipeline_pair", "lecture_roofline", "lecture_batching",
                   "lecture_scheduling"})  # fmt: skip
# ranks started by srun across the job's nodes
MULTI_NODE = frozenset({"pipeline_run", "pipeline_pair"})


def need(config: Mapping[str, Any], rule: str, wildcards: Any) -> Need:
    """The resources of one job of `rule` at the config's scale."""
    estimate = ESTIMATES.get(rule, _small)(config, wildcards)
    estimate = dataclasses.replace(estimate, exclusive=rule in TIMED)
    return on_device(estimate, config["resources"]["device"])


def resources_of(config: Mapping[str, Any], rule: str) -> dict[str, Any]:
    """`rule`'s resources: one function of the job's wildcards per resource. Cores are left to
    the rule's `threads` on CPU scales; timed rules ask Slurm for their node alone."""
    keys = ["mem_mb", "runtime", "gpu", "gpu_mem_mb", "nodes"]
    keys += ["cpus_per_task"] if config["resources"]["device"] != "cpu" else []
    keys += ["tasks"] if rule in MULTI_NODE else []
    out: dict[str, Any] = {k: _resource(config, rule, k) for k in keys}
    if rule in TIMED:
        out["slurm_extra"] = "'--exclusive'"
    return out


def _resource(config: Mapping[str, Any], rule: str, key: str) -> Callable[[Any], Any]:
    return lambda wildcards: need(config, rule, wildcards).resources()[key]


def _model(config: Mapping[str, Any], wildcards: Any, key: str = "model") -> Card:
    return card_of(config, getattr(wildcards, key))


def _dtype(config: Mapping[str, Any]) -> str:
    return config["resources"]["dtype"]


def _small(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Bookkeeping jobs: tables, splits, plans."""
    return Need(0, 0.0, 4.0, 1, 0.25)


def _fetch(config: Mapping[str, Any], wildcards: Any) -> Need:
    gb = weights_gb(_model(config, wildcards), "bfloat16")
    return Need(0, 0.0, 2.5 * gb + 8, 4, gb / RATES.download_gb_s / 3600 + 0.25)


def _covariance(config: Mapping[str, Any], wildcards: Any) -> Need:
    card, calib = _model(config, wildcards), config["care"]["calibration"]
    tokens = calib["n_samples"] * calib["seq_len"]
    base = inference(card, _dtype(config), batch=calib["batch_size"], context=calib["seq_len"],
                     decode_steps=0, score_tokens=tokens)  # fmt: skip
    cov = card.layers * card.hidden**2 * 8 / GB  # float64 X^T X of every layer
    return Need(base.gpus, base.gpu_gb + cov, base.host_gb + cov, base.cpus, base.hours + 0.25)


def _cpu_linear_algebra(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Factorizations and conversions: float32 weights, float64 per-layer SVDs on cores."""
    card = _model(config, wildcards)
    svd = 2 * card.layers * 10 * card.hidden**3  # K and V: ~10 d^3 per dense SVD
    hours = svd / (NODE.cpu_gflops * 1e9 * 16) / 3600 + 0.25
    host = 4 * card.params / GB + 3 * card.layers * card.hidden**2 * 8 / GB + 8
    return Need(0, 0.0, host, 16, hours)


def _evaluate(config: Mapping[str, Any], wildcards: Any) -> Need:
    card = _model(config, wildcards)
    tokens = sum(TASK_TOKENS.get(t.get("lm_eval") or t.get("template", ""), 5e6)
                 for t in config["eval"]["tasks"].values())  # fmt: skip
    batch, context = config["eval"]["batch_size"], config["eval"]["max_length"] or 4096
    return inference(card, eval_dtype(config), batch=batch, context=context, decode_steps=0,
                     score_tokens=tokens)  # fmt: skip


def _evaluate_converted(config: Mapping[str, Any], wildcards: Any) -> Need:
    """evaluate_lmeval: the conversion on the host (convert_mla's memory; no factorization:
    the float32 weights read, copied and written once each), then the evaluation."""
    convert, evaluate = _cpu_linear_algebra(config, wildcards), _evaluate(config, wildcards)
    io_hours = 3 * weights_gb(_model(config, wildcards), "float32") / RATES.disk_gb_s / 3600
    return dataclasses.replace(evaluate, host_gb=max(evaluate.host_gb, convert.host_gb),
                               hours=evaluate.hours + io_hours)  # fmt: skip


# scored tokens of lm-eval's full test sets (documents x choices x tokens; estimates)
TASK_TOKENS = {"wikitext": 3e5, "arc_challenge": 1.2e6, "arc_easy": 2.2e6, "hellaswag": 8e6,
               "piqa": 9e5, "mmlu": 1.2e7, "openbookqa": 3e5, "race": 4e6,
               "winogrande": 3e5}  # fmt: skip


def _decode_speed(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Timed decoding of the original, its conversion at each rank and the restoration, all
    loaded at once, each with its cache at one context (`kvspec.care.decode_speed.measure`);
    with `restored`, first a restoration on the host (as heal_restore's): its memory and time
    come before the timed part."""
    card, spec = _model(config, wildcards), config["care"]["decode_speed"]
    ranks = spec["ranks"]["ranks"] or spec["ranks"]["fractions"]  # explicit ranks win
    models = 1 + len(ranks) + bool(spec["restored"])
    steps = len(spec["contexts"]) * spec["new_tokens"] * spec["repeats"] * models
    timed = inference(card, _dtype(config), batch=1, context=max(spec["contexts"]),
                      decode_steps=steps, score_tokens=sum(spec["contexts"]) * models,
                      models=models)  # fmt: skip
    if not spec["restored"]:
        return timed
    restore = _cpu_linear_algebra(config, wildcards)
    return dataclasses.replace(timed, host_gb=max(timed.host_gb, restore.host_gb),
                               hours=timed.hours + restore.hours)  # fmt: skip


def _specdecode_mla(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Two models of the target's size (GQA and its healed MLA form) in one process: each
    prefills every prompt once and decodes it with greedy and every method."""
    card, spec = _model(config, wildcards), config["spec"]["mla_target"]
    runs = len(spec["contexts"]) * spec["n"] * 2
    steps = runs * spec["max_new_tokens"] * (1 + len(spec["methods"]))
    need = inference(card, _dtype(config), batch=1, context=max(spec["contexts"]),
                     decode_steps=steps, score_tokens=runs * max(spec["contexts"]))  # fmt: skip
    both = 2 * need.gpu_gb * need.gpus  # the MLA model is at most the GQA one's size
    gpus = gpus_for(both)
    return dataclasses.replace(need, gpus=gpus, gpu_gb=both / gpus, host_gb=2 * need.host_gb,
                               cpus=8 * gpus)  # fmt: skip


def _heal_train(config: Mapping[str, Any], wildcards: Any) -> Need:
    """CE + KD healing: student with AdamW sharded over the processes (FSDP: bf16 weights and
    gradients, fp32 master and moments = 16 bytes per parameter), the frozen teacher in bf16,
    activations of one micro-batch with gradient checkpointing."""
    card, heal = _model(config, wildcards), config["care"]["heal"]
    train, n = heal["train"], heal["train"]["processes"]
    p = card.params
    # activations of one micro-batch: every layer's (without checkpointing), and both logits
    act = train["micro_batch"] * train["seq_len"] * (card.hidden * card.layers * 2 * 16
                                                    + 2 * card.vocab * 4)  # fmt: skip
    shards = n if train["sharding"] == "fsdp" else 1  # ddp: a full copy per GPU
    if train["gradient_checkpointing"]:  # each layer's input kept, one layer recomputed
        act = train["micro_batch"] * train["seq_len"] * (card.hidden * card.layers * 2
                                                        + card.hidden * 2 * 16
                                                        + 2 * card.vocab * 4)  # fmt: skip
    gpu_gb = (16 * p + 2 * p) / shards / GB + act / GB + 2.0
    flops = max(train["budgets"]) * (6 * p + 2 * p)  # student fwd+bwd, teacher fwd
    return Need(n, gpu_gb, 2 * 2 * p / GB + 32, 8 * n, flops_hours(flops, RATES.train, n))


def _heal_ablation(config: Mapping[str, Any], wildcards: Any) -> Need:
    """One ablation row: healing (as heal_train) to the ablation's one budget."""
    heal = config["care"]["heal"]
    train = {**heal["train"], "budgets": [heal["ablation"]["budget"]]}
    care = {**config["care"], "heal": {**heal, "train": train}}
    return _heal_train({**config, "care": care}, wildcards)


def _generate(config: Mapping[str, Any], wildcards: Any) -> Need:
    """One shard of bulk generation: its prompts x max_new_tokens, batched decoding."""
    card, gen = _model(config, wildcards), config["spec"]["generate"]
    prompts = config["spec"]["prompts"]["limit"] * gen["models"][wildcards.model] / gen["shards"]
    steps = math.ceil(prompts / gen["batch_size"]) * gen["max_new_tokens"]
    return inference(card, _dtype(config), batch=gen["batch_size"],
                     context=1024 + gen["max_new_tokens"], decode_steps=steps)  # fmt: skip


def _index(config: Mapping[str, Any], wildcards: Any) -> Need:
    """A suffix-array build: ~5 bytes per indexed token on disk, ~10 in memory."""
    gen = config["spec"]["generate"]
    tokens = config["spec"]["prompts"]["limit"] * (gen["max_new_tokens"] + 256)
    return Need(0, 0.0, 10 * tokens / GB + 8, 8, tokens / 2.4e6 / 3600 + 0.25)


def _speed(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Batch-1 decoding of every method on the set's prompts (each method about a greedy run)."""
    card, speed = _model(config, wildcards), config["spec"]["speed"]
    n = speed["sets"][wildcards.bench]["n"]
    methods = len(run_methods(config["spec"], wildcards.model, wildcards.bench))
    methods += speed["baseline_repeats"]
    steps = n * methods * speed["max_new_tokens"] * speed["repeats"]
    return inference(card, _dtype(config), batch=1, context=2048, decode_steps=steps)


def _sampling(kind: str) -> Estimate:
    def estimate(config: Mapping[str, Any], wildcards: Any) -> Need:
        s = config["sampling"]
        card = card_of(config, s["target"])
        block = s[kind]
        runs = {"humaneval": lambda: block["completions"] * humaneval_bound(s),
                "sweep": lambda: len(block["ks"]) * len(block["temperatures"])
                * block["problems"] + block["repeats"],
                "timing": lambda: len(block["methods"]) * block["runs"] * block["problems"],
                "math500": lambda: 2 * block["problems"]}[kind]()  # fmt: skip
        steps = runs * block["max_new_tokens"] * 3  # target + draft(s) per token
        return inference(card, _dtype(config), batch=_sample_rows(s, kind, wildcards),
                         context=2048, decode_steps=steps)  # fmt: skip

    return estimate


def _sample_rows(s: Mapping[str, Any], kind: str, wildcards: Any) -> int:
    """Sequences a sampling job decodes at once: HumanEval's classical job samples each
    problem's completions as one batch (`kvspec.sampling.methods.make_batch_sampler`); every
    other job one sequence."""
    method = getattr(wildcards, "method", None)
    if kind == "humaneval" and s["methods"].get(method, {}).get("kind") == "classical":
        return int(s["humaneval"]["completions"])
    return 1


def _sampling_pilot(config: Mapping[str, Any], wildcards: Any) -> Need:
    """The target alone sampling `samples` rows of every tried problem as one batch."""
    s = config["sampling"]
    pilot = s["pilot"]
    steps = (pilot["problems"] or HUMANEVAL_SIZE) * pilot["max_new_tokens"]
    return inference(card_of(config, s["target"]), _dtype(config), batch=pilot["samples"],
                     context=2048, decode_steps=steps)  # fmt: skip


def _moa_train(config: Mapping[str, Any], wildcards: Any) -> Need:
    """A head trained against the frozen target, data parallel over as many of the node's
    GPUs as its wall time needs (each holds the target and the head's AdamW state): target
    forward per sequence plus the head's own training (~1.2 decoder layers)."""
    card, moa = _model(config, wildcards), config["moa"]
    train, max_len = moa["train"], moa["data"]["max_len"]
    head = 1.2 * card.params / card.layers
    tokens = train["steps"] * train["batch_size"] * max_len
    act = max_len * (card.hidden * card.layers * 4 + card.vocab * 4)  # one sequence at a time
    gpu_gb = weights_gb(card, _dtype(config)) + 16 * head / GB + act / GB + 2.0
    one_gpu = flops_hours(tokens * (2 * card.params + 6 * head), RATES.train, 1)
    gpus = data_parallel(one_gpu, train["batch_size"])
    return Need(gpus, gpu_gb, 2 * weights_gb(card, "float32") + 32, 8 * gpus,
                one_gpu / gpus / RATES.scaling if gpus > 1 else one_gpu)  # fmt: skip


def data_parallel(one_gpu_hours: float, batch: int, node: Node = NODE) -> int:
    """The fewest GPUs of a node (a power of two, at most the batch) whose data-parallel run
    fits the longest job with its margin; the node's GPUs when none does."""
    for n in (1, 2, 4, 8):
        fits = one_gpu_hours / (n * (RATES.scaling if n > 1 else 1.0)) * 1.5 <= node.max_hours
        if n <= min(batch, node.gpus) and fits:
            return n
    return min(node.gpus, batch)


def _moa_bench(config: Mapping[str, Any], wildcards: Any) -> Need:
    card, moa = _model(config, wildcards), config["moa"]
    prompts = sum(s["n"] for s in moa["sets"].values())
    heads = len(moa["drafters"]) * 2 + len(moa["baselines"]) + moa["baseline_repeats"] + 1
    steps = prompts * heads * moa["max_new_tokens"]
    return inference(card, _dtype(config), batch=1, context=4096, decode_steps=steps)


def _moa_batching(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Figure 4: each method serves the requests at every batch size; counted as if every
    step decoded one token of one request (the upper bound, batch size 1)."""
    card, b = _model(config, wildcards), config["moa"]["batching"]
    methods = 1 + len(b["baselines"]) + len(b["drafters"])
    steps = len(b["slots"]) * methods * b["n"] * b["new_tokens"]
    return inference(card, _dtype(config), batch=max(b["slots"]), context=4096,
                     decode_steps=steps)  # fmt: skip


def _remote(config: Mapping[str, Any], wildcards: Any) -> Need:
    card, r = _model(config, wildcards), config["remote"]
    steps = r["n"] * (len(r["profiles"]) + len(r["cuts"])) * r["max_new_tokens"]
    return inference(card, _dtype(config), batch=1, context=4096, decode_steps=steps)


def _lecture(config: Mapping[str, Any], wildcards: Any) -> Need:
    """A worked example on the lecture's model: a few thousand decode steps, timed."""
    card = card_of(config, config["lecture"]["model"])
    return inference(card, _dtype(config), batch=16, context=8192, decode_steps=2e4)


def _acceptance(config: Mapping[str, Any], wildcards: Any) -> Need:
    """The target scores the held-out responses it is compared with."""
    card, spec = _model(config, wildcards), config["spec"]
    n = spec["heldout"][wildcards.heldout]["n"]
    tokens = n * (spec["generate"]["max_new_tokens"] + 256)
    return inference(card, _dtype(config), batch=8, context=2048, decode_steps=0,
                     score_tokens=tokens)  # fmt: skip


def _draft_quality(config: Mapping[str, Any], wildcards: Any) -> Need:
    """A draft and its target timed side by side on the draft's prompt sets, decoded once per
    confidence cut-off; forwards timed at every width in `feeds` and 1 ... k + 1."""
    teacher = config["models"][wildcards.model]["distil"]["teacher"]
    card, d = card_of(config, teacher), config["spec"]["drafts"]
    widths = {*d["feeds"], *range(1, d["k"] + 2)}
    steps = 100 * d["max_new_tokens"] * len(d["cutoffs"]) + d["repeats"] * len(widths) * 10
    return inference(card, _dtype(config), batch=1, context=d["cache_len"] + d["max_new_tokens"],
                     decode_steps=steps)  # fmt: skip


def _distil(config: Mapping[str, Any], wildcards: Any) -> Need:
    """A small student trained on its teacher's top-k log-probabilities (teacher scores each
    sequence once)."""
    decl = config["models"][wildcards.model]["distil"]
    teacher, student = card_of(config, decl["teacher"]), _model(config, wildcards)
    train = decl["train"]
    tokens = train["steps"] * train["batch_size"] * decl["data"]["max_len"]
    flops = tokens * (6 * student.params + 2 * teacher.params)
    gb = weights_gb(teacher, _dtype(config)) + 16 * student.params / GB + 4.0
    return Need(1, gb, 2 * weights_gb(teacher, "float32") + 16, 8,
                flops_hours(flops, RATES.train, 1))  # fmt: skip


def _pipeline(config: Mapping[str, Any], wildcards: Any) -> Need:
    """Every strategy's ranks as srun tasks across nodes (CPU inference, document 003): one
    node per rank of the largest run, each holding its share of the float32 target."""
    p = config["pipeline"]
    return _pipeline_need(config, p["target"], p["draft"], p["n_stages"], len(p["ablations"]))


def _pipeline_pair(config: Mapping[str, Any], wildcards: Any) -> Need:
    """One more model pair of Figure 9: the strategies at the figure's one stage count."""
    n_stages = [config["pipeline"]["figure_9"]["n_stages"]]
    return _pipeline_need(config, wildcards.model, wildcards.draft, n_stages, 0)


def _pipeline_need(config: Mapping[str, Any], target: str, draft: str, n_stages: list[int],
                   ablations: int) -> Need:  # fmt: skip
    p = config["pipeline"]
    card, draft_card = card_of(config, target), card_of(config, draft)
    ranks = max(n_stages) + 1
    prompts = sum(p["sets"].values()) * p["runs"]
    # per prompt: the one-process baseline, then every strategy and ablation per stage count
    configs = 1 + len(n_stages) * (len(p["strategies"]) + ablations)
    hours = prompts * configs * p["max_new_tokens"] * 0.2 / 3600 + 0.5
    if p["launcher"] != "srun":  # every rank a process of this job, on one machine
        host = 4 * (card.params + draft_card.params) / GB + ranks * CPU_PROCESS_GB
        return Need(0, 0.0, host, p["threads_per_rank"] * ranks, hours)
    node_gb = 4 * max(card.params / (ranks - 1), draft_card.params) / GB + 16
    return Need(0, 0.0, node_gb, p["threads_per_rank"], hours, nodes=ranks,
                tasks=ranks)  # fmt: skip


ESTIMATES: dict[str, Estimate] = {
    "models_fetch": _fetch,
    "models_gguf": _fetch,
    "covariance_collect": _covariance,
    "convert_factorize": _cpu_linear_algebra,
    "convert_mla": _cpu_linear_algebra,
    "heal_restore": _cpu_linear_algebra,
    "convert_decode_speed": _decode_speed,
    "specdecode_mla": _specdecode_mla,
    "evaluate_original": _evaluate,
    "evaluate_lmeval": _evaluate_converted,
    "evaluate_healed": _evaluate,
    "heal_train": _heal_train,
    "heal_ablation": _heal_ablation,
    "generate_responses": _generate,
    "ngram_index": _index,
    "specdecode_speed": _speed,
    "sampling_sweep": _sampling("sweep"),
    "sampling_pilot": _sampling_pilot,
    "sampling_humaneval": _sampling("humaneval"),
    "sampling_timing": _sampling("timing"),
    "sampling_math500": _sampling("math500"),
    "moa_train": _moa_train,
    "moa_bench": _moa_bench,
    "moa_batching": _moa_batching,
    "remote_run": _remote,
    "pipeline_run": _pipeline,
    "pipeline_pair": _pipeline_pair,
    "specdecode_acceptance": _acceptance,
    "specdecode_draft_quality": _draft_quality,
    "models_distil": _distil,
    "lecture_roofline": _lecture,
    **{
        f"lecture_{e}": _lecture
        for e in ("batching", "kv_cache", "quantization", "speculative", "scheduling", "paged")
    },  # fmt: skip
}
