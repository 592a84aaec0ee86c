# Helpers shared by every stage (the only place with Python helpers).
import re
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from kvspec.config import ConfigError, validate

try:
    _validated = validate(
        config,
        yaml.safe_load(
            open(Path(workflow.basedir) / "workflow/schemas/config.schema.yaml")
        ),
    )
except ConfigError as err:
    raise WorkflowError(str(err)) from None
config.clear()
config.update(_validated)

DATASETS = sorted(config["data"]["datasets"])
MODELS = sorted(config["models"])
PRETRAINED = [m for m in MODELS if config["models"][m]["pretrain"]]
HUB_MODELS = [m for m in MODELS if not config["models"][m]["pretrain"]]


def one_of(names):
    """A wildcard regex matching exactly the given names (nothing when the list is empty)."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    dataset=one_of(DATASETS),
    model=one_of(MODELS),


def repo_path(relative):
    """Absolute path of a file shipped in the repository (configs, captions, paper numbers)."""
    return str(Path(workflow.basedir) / relative)


def script_path(name):
    """Path of scripts/<name>, relative to the including .smk file as Snakemake expects."""
    return f"../../scripts/{name}"


def env_path(name):
    """Path of envs/<name>.yaml for the conda: directive."""
    return f"../../envs/{name}.yaml"


def dataset_spec(wildcards):
    """The dataset's declaration, less its free-text note (editing a note reruns nothing)."""
    spec = config["data"]["datasets"][wildcards.dataset]
    return {k: v for k, v in spec.items() if k != "note"}


def dataset_notes():
    """Each dataset's free-text note (only the data-sources table depends on them)."""
    return {n: spec["note"] for n, spec in config["data"]["datasets"].items()}


def pretrain_spec(wildcards):
    return config["models"][wildcards.model]["pretrain"]


def hub_model_id(wildcards):
    return config["models"][wildcards.model]["hub"]


def pretrain_sources(wildcards):
    return {n: f"results/data/{n}.jsonl" for n in config["pretrain"]["sources"]}


def pretrain_source_kinds(wildcards):
    return {
        n: config["data"]["datasets"][n]["kind"] for n in config["pretrain"]["sources"]
    }


def pretrain_report_outputs():
    if not PRETRAINED:
        return []
    return expand(
        "results/report/pretrain_{item}",
        item=["loss.png", "loss.pdf", "summary.csv", "summary.md"],
    )


# ---- CARE (thesis ch. 3): variants, their evaluated columns, and the report inputs ----------
from kvspec.config import kv_width, resolve_ranks

CARE = config.get("care") or {}
EVAL_TASKS = config["eval"]["tasks"]
CARE_FACTS = ["svd", "asvd", "care"]
# (model, variant) -> evaluated columns; variant is "original" or "<fact>-<calib>/<plan>"
CARE_EVALS = {}
CARE_CALIBS = set()  # every calibration tag "<label>-n<N>-t<T>" in use


def care_tag(label, n=None, t=None):
    """Calibration tag of a set label (default N and T unless given)."""
    cal = CARE["calibration"]
    tag = f"{label}-n{n or cal['n_samples']}-t{t or cal['seq_len']}"
    CARE_CALIBS.add(tag)
    return tag


def care_variant(fact, tag, plan):
    """Variant path of a conversion; weight SVD needs no calibration ("none")."""
    return f"{fact}-{'none' if fact == 'svd' else tag}/{plan}"


def care_ranks(model, spec, key):
    return resolve_ranks(spec, kv_width(config, model), key)


def care_add(model, variant, columns):
    CARE_EVALS.setdefault((model, variant), set()).update(columns)


def care_table_variants(model):
    """Table 3.1/3.2 rows: (label, rank or None, variant), the original GQA model first."""
    rows = [("GQA (Original)", None, "original")]
    for method in CARE["methods"]:
        fact, alloc = method.split("-")
        for r in care_ranks(model, CARE["ranks"], "care.ranks"):
            rows.append(
                (method, r, care_variant(fact, care_tag(CARE_DEFAULT), f"{alloc}-r{r}"))
            )
    return rows


def care_table_3_4_variants():
    model, sweep = CARE["table_3_1_model"], CARE["table_3_4"]
    return [
        (label, r, care_variant("care", care_tag(label), f"waterfill-r{r}"))
        for label in sweep["calibration"]
        for r in care_ranks(model, sweep["ranks"], "care.table_3_4.ranks")
    ]


def care_table_3_5_variants():
    model, sweep = CARE["table_3_1_model"], CARE["table_3_5"]
    return [
        (alloc, r, care_variant("care", care_tag(CARE_DEFAULT), f"{alloc}-r{r}"))
        for r in care_ranks(model, sweep["ranks"], "care.table_3_5.ranks")
        for alloc in ("uniform", "waterfill")
    ]


def care_figure_3_4_variants():
    """(sweep, n, t, rank, variant): sample counts at fixed T, lengths at fixed N."""
    model, sweep = CARE["table_3_1_model"], CARE["figure_3_4"]
    points = [("n_samples", n, sweep["fixed_seq_len"]) for n in sweep["n_samples"]]
    points += [("seq_len", sweep["fixed_n_samples"], t) for t in sweep["seq_lens"]]
    return [
        (
            kind,
            n,
            t,
            r,
            care_variant("care", care_tag(CARE_DEFAULT, n, t), f"waterfill-r{r}"),
        )
        for kind, n, t in points
        for r in care_ranks(model, sweep["ranks"], "care.figure_3_4.ranks")
    ]


def care_figure_3_1_variants():
    """(panel, index, variant): halve-l<layer> and svgroup-g<group> plans."""
    fig = CARE["figure_3_1"]
    arch = (config["models"][fig["model"]]["pretrain"] or {}).get("arch") or {}
    layers = fig["layers"] if fig["layers"] is not None else range(arch["layers"])
    tag = care_tag(CARE_DEFAULT)
    rows = [
        ("halve", i, care_variant(fig["method"], tag, f"halve-l{i}")) for i in layers
    ]
    rows += [
        ("svgroup", g, care_variant(fig["method"], tag, f"svgroup-g{g}"))
        for g in range(fig["groups"])
    ]
    return rows


def care_figure_3_3_plans():
    model, fig = CARE["table_3_1_model"], CARE["figure_3_3"]
    return [
        (
            label,
            r,
            f"results/convert/{model}/ranks/care-{care_tag(label)}/waterfill-r{r}.json",
        )
        for label in fig["calibration"]
        for r in care_ranks(model, fig["ranks"], "care.figure_3_3.ranks")
    ]


def care_table_models():
    return [m for m in (CARE["table_3_1_model"], CARE["table_3_2_model"]) if m]


def care_register():
    """Fill CARE_EVALS from every table and figure of the configured scale."""
    every = list(EVAL_TASKS)
    for model in care_table_models():
        for _, _, variant in care_table_variants(model):
            care_add(model, variant, every)
    main = CARE["table_3_1_model"]
    for _, _, variant in care_table_3_4_variants():
        care_add(main, variant, CARE["table_3_4"]["columns"])
    for _, _, variant in care_table_3_5_variants():
        care_add(main, variant, CARE["table_3_5"]["columns"])
    for *_, variant in care_figure_3_4_variants():
        care_add(main, variant, CARE["figure_3_4"]["columns"])
    fig = CARE["figure_3_1"]
    for panel, _, variant in care_figure_3_1_variants():
        care_add(
            fig["model"],
            variant,
            fig[f"{'halve' if panel == 'halve' else 'group'}_columns"],
        )
    care_add(fig["model"], "original", fig["halve_columns"] + fig["group_columns"])
    care_figure_3_3_plans()


if CARE:
    CARE_DEFAULT = CARE["calibration"]["default"]
    care_register()


def care_eval_path(model, variant):
    return f"results/evaluate/{model}/{variant}.json"


def care_eval_columns(wildcards):
    """Columns evaluated for this (model, variant), in eval.tasks order."""
    variant = "original"
    if hasattr(wildcards, "fact"):
        variant = f"{wildcards.fact}-{wildcards.calib}/{wildcards.plan}"
    elif hasattr(wildcards, "budget"):
        variant = heal_variant(wildcards.method, wildcards.budget)
    wanted = CARE_EVALS.get((wildcards.model, variant), set())
    return [c for c in EVAL_TASKS if c in wanted]


def care_eval_tasks(wildcards):
    """Column -> TaskSpec fields (kvspec.eval.harness) for this evaluation."""
    out = {}
    for col in care_eval_columns(wildcards):
        task = EVAL_TASKS[col]
        data = f"results/data/{task['dataset']}.jsonl" if task["template"] else None
        out[col] = {
            "metric": task["metric"],
            "template": task["template"],
            "data": data,
            "lm_eval": task["lm_eval"],
            "limit": task["limit"],
            "max_words": task["max_words"],
        }
    return out


def care_eval_data(wildcards):
    return [t["data"] for t in care_eval_tasks(wildcards).values() if t["data"]]


def care_calib_parts(tag):
    label, n, t = re.fullmatch(r"([a-z0-9_]+)-n(\d+)-t(\d+)", tag).groups()
    return label, int(n), int(t)


def care_calib_data(wildcards):
    label, _, _ = care_calib_parts(wildcards.calib)
    return f"results/data/{CARE['calibration']['sets'][label]}.jsonl"


def care_calib_settings(wildcards):
    label, n, t = care_calib_parts(wildcards.calib)
    name = CARE["calibration"]["sets"][label]
    return {
        "n_samples": n,
        "seq_len": t,
        "batch_size": CARE["calibration"]["batch_size"],
        "kind": config["data"]["datasets"][name]["kind"],
    }


def care_factor_inputs(wildcards):
    """Source model, plus the covariance file unless the method is plain SVD."""
    inputs = {"model": f"results/models/{wildcards.model}"}
    if wildcards.fact != "svd":
        inputs["stats"] = (
            f"results/covariance/{wildcards.model}/{wildcards.calib}.safetensors"
        )
    return inputs


def care_sensitivity_opts(wildcards):
    """Figure 3.1c settings; the halving plans need none (so editing them reruns no halving)."""
    fig = CARE["figure_3_1"]
    if wildcards.plan.startswith("halve"):
        return {}
    return {"groups": fig["groups"], "last_layers": fig["last_layers"]}


def care_eval_settings():
    return {
        "batch_size": config["eval"]["batch_size"],
        "max_length": config["eval"]["max_length"],
        "seed": config["seed"],
        "dtype": config["resources"]["dtype"],
        "device": config["resources"]["device"],
    }


def care_rows(rows, model):
    """Report rows as plain dicts with the evaluation file of each variant."""
    return [
        {"label": label, "rank": rank, "file": care_eval_path(model, variant)}
        for label, rank, variant in rows
    ]


def care_report_params(item):
    """What each CARE report item plots or tabulates (row labels and their files)."""
    main = CARE["table_3_1_model"]
    if item in ("table_3_1", "table_3_2"):
        model = CARE[f"{item}_model"]
        return {"rows": care_rows(care_table_variants(model), model), "model": model}
    if item in ("table_3_4", "table_3_5"):
        rows = (
            care_table_3_4_variants if item == "table_3_4" else care_table_3_5_variants
        )()
        return {
            "rows": care_rows(rows, main),
            "model": main,
            "columns": CARE[item]["columns"],
        }
    if item == "figure_3_4":
        rows = [
            {"sweep": k, "n": n, "t": t, "rank": r, "file": care_eval_path(main, v)}
            for k, n, t, r, v in care_figure_3_4_variants()
        ]
        return {"rows": rows, "columns": CARE["figure_3_4"]["columns"], "model": main}
    if item == "figure_3_3":
        rows = [
            {"label": l, "rank": r, "file": f} for l, r, f in care_figure_3_3_plans()
        ]
        return {"rows": rows, "model": main}
    fig = CARE["figure_3_1"]
    rows = [
        {"panel": p, "index": i, "file": care_eval_path(fig["model"], v)}
        for p, i, v in care_figure_3_1_variants()
    ]
    base = care_eval_path(fig["model"], "original")
    return {"rows": rows, "baseline": base, **fig}


CARE_ITEMS = {
    "table_3_1": ["csv", "md"],
    "table_3_2": ["csv", "md"],
    "table_3_4": ["csv", "md"],
    "table_3_5": ["csv", "md"],
    "figure_3_1": ["png", "pdf", "csv"],
    "figure_3_3": ["png", "pdf", "csv"],
    "figure_3_4": ["png", "pdf", "csv"],
}


def care_items():
    """Report items of the configured scale (Table 3.2 only with a second model)."""
    if not CARE:
        return []
    return [i for i in CARE_ITEMS if i != "table_3_2" or CARE["table_3_2_model"]]


def care_report_inputs(item):
    """Every evaluation (or rank plan) file a report item reads."""
    params = care_report_params(item)
    files = [row["file"] for row in params["rows"]]
    return files + ([params["baseline"]] if "baseline" in params else [])


def care_report_paper(item):
    """The thesis's numbers for a report item (none are printed for Figures 3.3 and 3.4)."""
    path = repo_path(f"config/paper_results/thesis_{item}.csv")
    return [path] if Path(path).is_file() else []


def care_outputs():
    """Final products of the CARE stages (covariance, convert, evaluate; thesis ch. 3)."""
    return [
        f"results/report/thesis_{item}.{ext}"
        for item in care_items()
        for ext in CARE_ITEMS[item]
    ]


# ---- Healing (thesis Table 3.3): restored / SVD students, budgets, evaluations ------------
HEAL = (CARE.get("heal") or {}) if CARE else {}


def heal_rank():
    """Table 3.3's MLA rank r (cache 2·r per token and layer for every method)."""
    if HEAL["rank"]:
        return HEAL["rank"]
    width = kv_width(config, HEAL["model"])
    if width is None:
        raise WorkflowError(
            "config key 'care.heal.rank': the model has no pretrain arch to resolve "
            "rank_fraction of g_h·d_h; give an explicit rank"
        )
    return max(1, round(HEAL["rank_fraction"] * width))


def heal_variant(method, budget):
    return f"heal-{method}/tokens-{budget}"


def heal_calib_tag(method):
    return care_tag(HEAL["calibration"][method], HEAL["n_samples"], HEAL["seq_len"])


def heal_restore_stats(wildcards):
    tag = heal_calib_tag(wildcards.method)
    return f"results/covariance/{wildcards.model}/{tag}.safetensors"


def heal_student(wildcards):
    """The model healing starts from: the plain SVD MLA model, or a restored one."""
    if wildcards.method == "svd":
        plan = care_variant("svd", None, f"uniform-r{heal_rank()}")
        return f"results/convert/{wildcards.model}/models/{plan}"
    return f"results/heal/{wildcards.model}/init/{wildcards.method}"


def heal_data():
    return f"results/data/{HEAL['data']['dataset']}.jsonl"


def heal_kind():
    return config["data"]["datasets"][HEAL["data"]["dataset"]]["kind"]


def heal_report_params():
    model = HEAL["model"]
    rows = [
        {
            "method": m,
            "budget": b,
            "calibration": (
                heal_calib_tag(m) if m in HEAL["calibration"] and m != "svd" else None
            ),
            "file": care_eval_path(model, heal_variant(m, b)),
        }
        for m in HEAL["methods"]
        for b in HEAL["train"]["budgets"]
    ]
    curves = {m: f"results/heal/{model}/{m}/curve.csv" for m in HEAL["methods"]}
    return {
        "rows": rows,
        "baseline": care_eval_path(model, "original"),
        "curves": curves,
        "model": model,
        "rank": heal_rank(),
    }


def heal_report_inputs():
    params = heal_report_params()
    return [r["file"] for r in params["rows"]] + [params["baseline"]]


def heal_outputs():
    if not HEAL:
        return []
    return [
        *expand("results/report/thesis_table_3_3.{ext}", ext=["csv", "md"]),
        *expand("results/report/heal_convergence.{ext}", ext=["png", "pdf", "csv"]),
    ]


if HEAL:
    for _m in HEAL["methods"]:
        for _b in HEAL["train"]["budgets"]:
            care_add(HEAL["model"], heal_variant(_m, _b), list(EVAL_TASKS))
    care_add(HEAL["model"], "original", list(EVAL_TASKS))


SPEC = config.get("spec") or {}
if SPEC:
    from kvspec.spec.settings import check_spec, fraction_name

    try:
        check_spec(config)
    except ConfigError as err:
        raise WorkflowError(str(err)) from None
    SPEC_GEN_MODELS = sorted(SPEC["generate"]["models"])
    SPEC_FRACTIONS = sorted({fraction_name(f) for f in SPEC["index"]["sft_fractions"]})
    SPEC_HELDOUT = sorted(SPEC["heldout"])
    SPEC_BENCH_SETS = sorted(SPEC["speed"]["sets"])
else:
    SPEC_GEN_MODELS = SPEC_FRACTIONS = SPEC_HELDOUT = SPEC_BENCH_SETS = []


def spec_cfg(*keys):
    """A value of the spec block (None when the spec stages are not configured)."""
    value = SPEC
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def spec_prompt_sources(wildcards):
    return {n: f"results/data/{n}.jsonl" for n in SPEC["prompts"]["sources"]}


def spec_gen_fraction(wildcards):
    return SPEC["generate"]["models"][wildcards.model]


def spec_gen_heldout(wildcards):
    """Only the main target answers the held-out prompts (acceptance analysis positions)."""
    return wildcards.model == SPEC["target"]


def spec_gen_shards(wildcards):
    return expand(
        "results/generate/{model}/shards/{shard}.jsonl",
        model=wildcards.model,
        shard=range(SPEC["generate"]["shards"]),
    )


def ngram_inputs(wildcards):
    """SFT responses come with the prompts; target responses from the model's generation."""
    corpus = {
        "sft": "results/generate/prompts.jsonl",
        "responses": f"results/generate/{wildcards.model}/responses.jsonl",
    }
    return {
        "corpus": corpus[wildcards.corpus],
        "model": f"results/models/{wildcards.model}",
    }


def ngram_fraction(wildcards):
    return float(wildcards.fraction)


def acceptance_inputs(wildcards):
    index = f"results/ngram/{wildcards.model}/{wildcards.corpus}_{wildcards.fraction}"
    outputs = {
        "sft": "results/generate/prompts.jsonl",
        "target": f"results/generate/{wildcards.model}/responses.jsonl",
    }
    return {
        "model": f"results/models/{wildcards.model}",
        "index": index,
        "index_stats": f"{index}.json",
        "outputs": outputs[wildcards.responses],
    }


def speed_methods(wildcards):
    return SPEC["speed"]["runs"][wildcards.model]["methods"]


def speed_set(wildcards):
    """The benchmark set, with the kind of its prompt source (held-out, code or math)."""
    bench = dict(SPEC["speed"]["sets"][wildcards.bench], name=wildcards.bench)
    src = bench["prompts"]
    bench["kind"] = "heldout" if src in SPEC["heldout"] else dataset_kind(src)
    return bench


def dataset_kind(name):
    return config["data"]["datasets"][name]["kind"]


def speed_inputs(wildcards):
    methods = speed_methods(wildcards)
    src = SPEC["speed"]["sets"][wildcards.bench]["prompts"]
    inputs = {
        "model": f"results/models/{wildcards.model}",
        "prompts": (
            "results/generate/prompts.jsonl"
            if src in SPEC["heldout"]
            else f"results/data/{src}.jsonl"
        ),
    }
    if {"hf_assisted", "sd_draft"} & set(methods):
        inputs["draft"] = f"results/models/{SPEC['draft']}"
    if "sd_infgram_sft" in methods:
        inputs["index_sft"] = f"results/ngram/{wildcards.model}/sft_1"
        inputs["index_sft_stats"] = f"results/ngram/{wildcards.model}/sft_1.json"
    if "sd_infgram_target" in methods:
        inputs["index_target"] = f"results/ngram/{wildcards.model}/responses_1"
        inputs["index_target_stats"] = (
            f"results/ngram/{wildcards.model}/responses_1.json"
        )
    return inputs


def spec_sweep_acceptance():
    """Table 4.1: each SFT index of the size sweep on held-out SFT responses."""
    if not SPEC:
        return []
    return expand(
        "results/acceptance/{model}/sft_{fraction}/sft/{heldout}.csv",
        model=SPEC["target"],
        fraction=SPEC_FRACTIONS,
        heldout=SPEC["acceptance"]["sweep_heldout"],
    )


def spec_main_acceptance():
    """Tables 4.2-4.6: the full SFT and target indexes on held-out target responses."""
    if not SPEC:
        return []
    return expand(
        "results/acceptance/{model}/{index}/target/{heldout}.csv",
        model=SPEC["target"],
        index=["sft_1", "responses_1"],
        heldout=SPEC["acceptance"]["heldout"],
    )


def spec_index_stats():
    if not SPEC:
        return []
    return expand(
        "results/ngram/{model}/sft_{fraction}.json",
        model=SPEC["target"],
        fraction=SPEC_FRACTIONS,
    )


def spec_speed_summaries(main):
    """Speed summaries of the main target (Table 4.7) or of the other models (Table 4.8)."""
    if not SPEC:
        return []
    runs = SPEC["speed"]["runs"]
    return [
        f"results/specdecode/{model}/{bench}/summary.csv"
        for model in sorted(runs)
        if (model == SPEC["target"]) == main
        for bench in runs[model]["sets"]
    ]


def spec_paper_tables(numbers):
    """{"t4_N": paper CSV} for the given thesis table numbers."""
    return {
        f"t4_{n}": repo_path(f"config/paper_results/thesis_table_4_{n}.csv")
        for n in numbers
    }


def spec_report_items(numbers, category):
    """{"t4_N": CSV report item, "t4_N_md": Markdown} for the given thesis tables."""
    items = {}
    for n in numbers:
        items[f"t4_{n}"] = report(
            f"results/report/thesis_table_4_{n}.csv",
            caption=f"../report/thesis_table_4_{n}.rst",
            category=category,
            labels={"item": f"Table 4.{n}", "format": "csv"},
        )
        items[f"t4_{n}_md"] = f"results/report/thesis_table_4_{n}.md"
    return items


def spec_table_4_7_columns():
    """The main target's first two benchmark sets fill Table 4.7's two column groups."""
    sets = SPEC["speed"]["runs"].get(SPEC["target"], {}).get("sets", []) if SPEC else []
    return dict(zip(["humaneval", "sft_coding"], sets))


def spec_set_labels():
    sets = spec_cfg("speed", "sets") or {}
    return {name: s.get("label") or name for name, s in sets.items()}


def spec_outputs():
    """Final products of the speculative-decoding stages (generate, ngram, specdecode; ch. 4)."""
    if not SPEC:
        return []
    tables = [f"thesis_table_4_{i}" for i in range(1, 9)]
    return [
        *expand("results/report/{table}.{ext}", table=tables, ext=["csv", "md"]),
        *expand("results/report/thesis_figure_4_1.{ext}", ext=["png", "pdf", "csv"]),
    ]


def all_outputs():
    """Every final product of the configured scale."""
    return [
        *expand("results/data/{dataset}.jsonl", dataset=DATASETS),
        *expand("results/models/{model}", model=MODELS),
        "results/report/thesis_table_2_1.csv",
        "results/report/thesis_table_2_1.md",
        "results/report/data_sources.csv",
        "results/report/data_sources.md",
        *pretrain_report_outputs(),
        *care_outputs(),
        *heal_outputs(),
        *spec_outputs(),
    ]
