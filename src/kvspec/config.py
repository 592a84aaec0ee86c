"""Config validation: JSON-Schema with defaults, plus cross-key checks the schema cannot say."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from kvspec.errors import ConfigError

__all__ = ["ConfigError", "schema_defaults", "validate"]


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For oneOf/anyOf failures, the sub-error that got furthest into the config; at equal
    depth one that is not a type mismatch (for `null`-or-object keys, the object's error)."""
    if not error.context:
        return error
    return max(
        (_deepest(e) for e in error.context),
        key=lambda e: (len(e.absolute_path), e.validator != "type"),
    )


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        parts.append(",".join(extra))
    if error.validator == "required":
        missing = [r for r in error.validator_value if r not in error.instance]
        parts.append(",".join(missing))
    return ".".join(parts) or "<root>"


def _defaulting_validator() -> type:
    """A Draft-7 validator class that fills in `default` values while it validates."""
    base = jsonschema.Draft7Validator
    set_props = base.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):  # noqa: ANN001
        if isinstance(instance, dict):
            for name, sub in props.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from set_props(validator, props, instance, schema)

    return jsonschema.validators.extend(base, {"properties": properties})


def validate(config: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return a defaults-filled copy of `config`, or raise ConfigError naming the bad key."""
    filled = copy.deepcopy(dict(config))
    validator = _defaulting_validator()(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        deepest = [_deepest(e) for e in errors[:10]]
        lines = [f"config key '{_key_path(e)}': {e.message}" for e in deepest]
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))
    check_cross_keys(filled)
    return canonical(filled)


SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def schema_defaults(*keys: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The schema's defaults of the config block at `keys` (e.g. "spec", "decode"): what a
    user of the library gets without a config file, from the one place defaults live."""
    import yaml

    node = schema if schema is not None else yaml.safe_load(SCHEMA.read_text())
    for key in keys:
        node = node["properties"][key]
    block: dict[str, Any] = {}
    _defaulting_validator()(node).validate(block)
    return block


def canonical(obj: Any) -> Any:
    """`obj` with every mapping's keys sorted, so that reordering keys in a config file does
    not look like a change to Snakemake's params-based rerun triggers."""
    if isinstance(obj, Mapping):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def check_dataset_source(name: str, spec: Mapping[str, Any], mirror: str | None) -> None:
    """A dataset must be loadable from somewhere: its package, its hub id, a pinned URL, or
    files present in the mirror. Caught here, the run stops before any job instead of at the
    data job."""
    if spec.get("package") or spec.get("hub") or spec.get("url"):
        return
    key = f"config key 'data.datasets.{name}'"
    if not mirror or not spec.get("mirror"):
        raise ConfigError(f"{key}: dataset {name!r} has no hub id, package or mirror file")
    missing = [f for f in spec["mirror"] if not (Path(mirror) / f).exists()]
    if missing:
        raise ConfigError(
            f"{key}: dataset {name!r}: {missing} not found in the mirror {mirror!r} "
            "and no hub fallback is given"
        )


MODEL_SOURCES = ("hub", "pretrain", "gguf", "distil")


def check_model_source(name: str, spec: Mapping[str, Any]) -> None:
    """A model comes from exactly one place: the hub, pretraining here, a packaged GGUF, or
    distillation here from another model."""
    given = [k for k in MODEL_SOURCES if spec.get(k)]
    if len(given) != 1:
        got = f"got {', '.join(repr(k) for k in given)}" if given else "got none"
        raise ConfigError(
            f"config key 'models.{name}': give exactly one of 'hub', 'pretrain', 'gguf' or "
            f"'distil' ({got})"
        )
    gguf = spec.get("gguf") or {}
    if gguf.get("sha256") and gguf.get("sha256_file"):
        raise ConfigError(
            f"config key 'models.{name}.gguf': give at most one of 'sha256' and 'sha256_file'"
        )


def check_cross_keys(config: Mapping[str, Any]) -> None:
    """Checks that relate several keys: references resolve, no eval split enters training."""
    datasets = config["data"]["datasets"]
    mirror = config["data"].get("mirror")
    if mirror and not Path(mirror).is_dir():
        raise ConfigError(f"config key 'data.mirror': directory {mirror!r} does not exist")
    for name, spec in datasets.items():
        check_dataset_source(name, spec, mirror)
    pre = config.get("pretrain", {})
    for name in pre.get("sources", []):
        if name not in datasets:
            raise ConfigError(f"config key 'pretrain.sources': unknown dataset {name!r}")
        if datasets[name].get("eval"):
            raise ConfigError(
                f"config key 'pretrain.sources': dataset {name!r} is an evaluation set "
                "(eval: true) and may not enter training"
            )
    for model, spec in config["models"].items():
        check_model_source(model, spec)
        if spec.get("pretrain") and not pre.get("sources"):
            raise ConfigError(f"config key 'models.{model}.pretrain': pretrain.sources is empty")
    check_engine(config["resources"])
    check_distil(config)
    check_care(config)
    for block, module in DOMAIN_CHECKS.items():
        if config.get(block):
            settings = importlib.import_module(f"kvspec.{module}.settings")
            getattr(settings, f"check_{block}")(config)


# config block -> the package whose `settings.check_<block>` validates it (none imports torch)
DOMAIN_CHECKS = {"spec": "ngram", "sampling": "sampling", "pipeline": "pipeline", "moa": "neural",
                 "remote": "remote", "lecture": "lecture"}  # fmt: skip


def check_engine(resources: Mapping[str, Any]) -> None:
    """The packed decode engines (resources.linear, resources.draft_linear) run float32 models on
    the CPU (`kvspec.decoding.packed`)."""
    device, dtype = resources["device"], resources["dtype"]
    for key in ("linear", "draft_linear"):
        linear = resources.get(key)
        if linear not in (None, "torch") and (device, dtype) != ("cpu", "float32"):
            raise ConfigError(
                f"config key 'resources.{key}': {linear!r} needs resources.device cpu and "
                f"resources.dtype float32 (got {device}, {dtype}); use {key}: torch"
            )


def decode_engines(resources: Mapping[str, Any]) -> dict[str, str]:
    """{"linear": the targets' decode engine, "draft_linear": the drafts'} of a validated
    config's `resources` (draft_linear null: the targets' engine)."""
    linear = resources["linear"]
    return {"linear": linear, "draft_linear": resources.get("draft_linear") or linear}


def eval_dtype(config: Mapping[str, Any]) -> str:
    """The dtype lm-eval runs load their models in: `eval.dtype`, or `resources.dtype` when
    that is null (a validated config)."""
    return config["eval"].get("dtype") or config["resources"]["dtype"]


def teacher_chain(config: Mapping[str, Any], name: str) -> list[str]:
    """`name`, its distillation teacher, that teacher's teacher, ... (stops at a repeat)."""
    chain = [name]
    while True:
        distil = (config["models"].get(chain[-1]) or {}).get("distil")
        if not distil or distil["teacher"] in chain:
            return chain + ([distil["teacher"]] if distil else [])
        chain.append(distil["teacher"])


def check_distil(config: Mapping[str, Any]) -> None:
    """Distilled models: the teacher exists, is not distilled from its student (no cycle),
    and answers the index prompts (its responses are the training sequences)."""
    models = config["models"]
    generated = ((config.get("spec") or {}).get("generate") or {}).get("models", {})
    for name, spec in models.items():
        if not spec.get("distil"):
            continue
        key = f"config key 'models.{name}.distil.teacher'"
        teacher = spec["distil"]["teacher"]
        if teacher not in models:
            raise ConfigError(f"{key}: unknown model {teacher!r}")
        chain = teacher_chain(config, name)
        if chain[-1] in chain[:-1]:
            raise ConfigError(f"{key}: distillation cycle {' <- '.join(chain)}")
        if not config.get("spec"):
            raise ConfigError(f"{key}: distillation reads the teacher's responses; add `spec`")
        if teacher not in generated:
            raise ConfigError(
                f"{key}: {teacher!r} answers no prompts; add it to spec.generate.models"
            )
        _check_distil_shape(config, name, spec["distil"])
        _check_warm_start(config, name, spec["distil"])


def _check_distil_shape(config: Mapping[str, Any], name: str, distil: Mapping[str, Any]) -> None:
    """init target names its layers; corpus datasets are instruction datasets of the config;
    calibration has the teacher's targets to fit on."""
    key = f"config key 'models.{name}.distil"
    if (distil.get("init") == "target") != bool(distil.get("layers")):
        raise ConfigError(f"{key}.layers': give the teacher's layers exactly with init: target")
    data, train = distil.get("data", {}), distil.get("train", {})
    if distil.get("calibrate") and not (train.get("beta", 1.0) > 0 or data.get("corpus")):
        raise ConfigError(f"{key}.calibrate': fitting a temperature needs the teacher's "
                          "targets: train.beta > 0 or a data.corpus")  # fmt: skip
    datasets = config["data"]["datasets"]
    for dataset in distil.get("data", {}).get("corpus", []):
        if datasets.get(dataset, {}).get("kind") != "instruction":
            raise ConfigError(f"{key}.data.corpus': {dataset!r} is not an instruction dataset")


def _check_warm_start(config: Mapping[str, Any], name: str, distil: Mapping[str, Any]) -> None:
    """`start` names another distilled draft of the same teacher, cut from a subset of this
    one's layers, reading out over the same tokens (same vocab and data), not started from
    this one."""
    start = distil.get("start")
    if not start:
        return
    key = f"config key 'models.{name}.distil.start'"
    other = ((config["models"].get(start) or {}).get("distil")) or {}
    if start == name or not other:
        raise ConfigError(f"{key}: {start!r} is not another distilled model")
    if other.get("start"):
        raise ConfigError(f"{key}: {start!r} starts from another draft itself (one level only)")
    if distil.get("init") != "target" or other.get("init") != "target":
        raise ConfigError(f"{key}: both drafts must be cut from the teacher (init: target)")
    for field in ("teacher", "vocab", "data"):
        if other.get(field) != distil.get(field):
            raise ConfigError(f"{key}: {start!r} has another {field} (both must read out over "
                              "the same tokens of the same teacher)")  # fmt: skip
    if not set(other["layers"]) <= set(distil["layers"]):
        raise ConfigError(f"{key}: {start!r}'s layers {other['layers']} are not all among "
                          f"{distil['layers']}")  # fmt: skip


def kv_width(config: Mapping[str, Any], model: str) -> int | None:
    """g_h·d_h of `model`: kv_heads · hidden/heads of its pretrain/distil arch, or the `kv_width`
    its gguf block states; None when the config does not say (hub models)."""
    spec = config["models"].get(model) or {}
    arch = (spec.get("pretrain") or spec.get("distil") or {}).get("arch")
    if arch:
        return arch["kv_heads"] * (arch["hidden"] // arch["heads"])
    return (spec.get("gguf") or {}).get("kv_width")


def resolve_ranks(spec: Mapping[str, Any], width: int | None, key: str) -> list[int]:
    """The integer ranks of a `care_ranks` block: explicit `ranks`, else fractions of `width`."""
    if spec.get("ranks"):
        ranks = list(spec["ranks"])
    elif spec.get("fractions"):
        if width is None:
            raise ConfigError(
                f"config key '{key}.fractions': the model has no pretrain arch or gguf "
                "kv_width to resolve fractions of g_h·d_h; give explicit ranks"
            )
        ranks = [max(1, round(f * width)) for f in spec["fractions"]]
    else:
        raise ConfigError(f"config key '{key}': give `fractions` or `ranks`")
    if width is not None and not all(1 <= r <= width for r in ranks):
        raise ConfigError(f"config key '{key}': ranks {ranks} must lie in [1, g_h·d_h={width}]")
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"config key '{key}': ranks {ranks} repeat a value")
    return ranks


def _check_care_data(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    datasets = config["data"]["datasets"]
    sets = care["calibration"]["sets"]
    for label, name in sets.items():
        if name not in datasets:
            raise ConfigError(
                f"config key 'care.calibration.sets.{label}': unknown dataset {name!r}"
            )
        if datasets[name]["kind"] not in ("text", "instruction"):
            raise ConfigError(
                f"config key 'care.calibration.sets.{label}': dataset {name!r} is "
                f"{datasets[name]['kind']}; calibration needs text or instruction data"
            )
    used = [("care.calibration.default", [care["calibration"]["default"]])]
    used += [(f"care.{k}.calibration", care[k]["calibration"]) for k in ("table_3_4", "figure_3_3")]
    for key, labels in used:
        for label in labels:
            if label not in sets:
                raise ConfigError(f"config key '{key}': unknown calibration set {label!r}")


def _check_care_models(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    models = [("care.model", care["model"])]
    models += [("care.alt_model", care["alt_model"])] if care["alt_model"] else []
    models += [("care.figure_3_1.model", care["figure_3_1"]["model"])]
    for key, model in models:
        if model not in config["models"]:
            raise ConfigError(f"config key '{key}': unknown model {model!r}")
    for key, model in models:
        width = kv_width(config, model)
        resolve_ranks(care["ranks"], width, "care.ranks")
        if care["alt_ranks"] is not None and key == "care.alt_model":
            resolve_ranks(care["alt_ranks"], width, "care.alt_ranks")
        for sweep in ("table_3_4", "table_3_5", "figure_3_3", "figure_3_4"):
            resolve_ranks(care[sweep]["ranks"], width, f"care.{sweep}.ranks")
    fig = care["figure_3_1"]
    arch = (config["models"][fig["model"]].get("pretrain") or {}).get("arch")
    if fig["layers"] is None and arch is None:
        raise ConfigError("config key 'care.figure_3_1.layers': list the layers (hub model)")
    if arch and any(i >= arch["layers"] for i in fig["layers"] or []):
        raise ConfigError(f"config key 'care.figure_3_1.layers': model has {arch['layers']} layers")
    if arch and fig["last_layers"] > arch["layers"]:
        raise ConfigError(f"config key 'care.figure_3_1.last_layers': > {arch['layers']} layers")
    width = kv_width(config, fig["model"])
    if width is not None and fig["groups"] > width:
        raise ConfigError(f"config key 'care.figure_3_1.groups': > g_h·d_h = {width}")


def _check_eval_tasks(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    tasks = config["eval"]["tasks"]
    datasets = config["data"]["datasets"]
    for col, task in tasks.items():
        if (task["template"] is None) == (task["lm_eval"] is None):
            raise ConfigError(
                f"config key 'eval.tasks.{col}': give exactly one of template, lm_eval"
            )
        if task["template"] is not None and task["dataset"] not in datasets:
            raise ConfigError(
                f"config key 'eval.tasks.{col}.dataset': unknown dataset {task['dataset']!r}"
            )
    columns = [
        ("care.columns", care["columns"] or []),
        ("care.heal.columns", (care.get("heal") or {}).get("columns") or []),
        ("care.table_3_4.columns", care["table_3_4"]["columns"]),
        ("care.table_3_5.columns", care["table_3_5"]["columns"]),
        ("care.figure_3_4.columns", care["figure_3_4"]["columns"]),
        ("care.figure_3_1.halve_columns", care["figure_3_1"]["halve_columns"]),
        ("care.figure_3_1.group_columns", care["figure_3_1"]["group_columns"]),
    ]
    for key, cols in columns:
        for col in cols:
            if col not in tasks:
                raise ConfigError(f"config key '{key}': column {col!r} is not in eval.tasks")
    if not tasks:
        raise ConfigError("config key 'eval.tasks': CARE needs at least one evaluated task")


def check_care(config: Mapping[str, Any]) -> None:
    """CARE block: datasets, models and columns exist; ranks lie in [1, g_h·d_h]."""
    care = config.get("care")
    if not care:
        return
    if len(set(care["methods"])) != len(care["methods"]):
        raise ConfigError("config key 'care.methods': a method is listed twice")
    _check_care_data(config, care)
    _check_care_models(config, care)
    _check_eval_tasks(config, care)
    _check_heal_budgets(care)
    _check_heal_ablation(care)
    _check_heal_rank(config, care)
    _check_decode_speed(config, care)
    _check_decide(config, care)


def _check_heal_rank(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    """A rank_fraction needs the model's g_h·d_h (a pretrain architecture) to resolve."""
    heal = care.get("heal")
    if heal and not heal["rank"] and kv_width(config, heal["model"]) is None:
        raise ConfigError("config key 'care.heal.rank': the model has no pretrain arch to "
                          "resolve rank_fraction of g_h·d_h; give an explicit rank")  # fmt: skip


def _check_decide(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    """`care.decide`: each table has a model, its ranks include the decide ranks, and the
    limits name columns of Tables 3.1/3.2."""
    decide = care["decide"]
    if not decide:
        return
    for table in decide["tables"]:
        alt = table == "table_3_2"
        model = care["alt_model"] if alt else care["model"]
        if model is None:
            raise ConfigError("config key 'care.decide.tables': table_3_2 needs care.alt_model")
        key = "care.alt_ranks" if alt and care["alt_ranks"] else "care.ranks"
        width = kv_width(config, model)
        ranks = resolve_ranks(decide["ranks"], width, "care.decide.ranks")
        table_ranks = resolve_ranks(care[key.split(".")[1]], width, key)
        if not set(ranks) <= set(table_ranks):
            raise ConfigError(
                f"config key 'care.decide.ranks': ranks {sorted(set(ranks) - set(table_ranks))} "
                f"of {model} are not among {key} {table_ranks}"
            )
    columns = care["columns"] or list(config["eval"]["tasks"])
    for col in decide["limits"]:
        if col not in columns:
            raise ConfigError(
                f"config key 'care.decide.limits': column {col!r} is not among Tables "
                f"3.1/3.2's columns {columns}"
            )


def _check_decode_speed(config: Mapping[str, Any], care: Mapping[str, Any]) -> None:
    """The timed conversions must be Table 3.1 models (a method and ranks of care.methods and
    care.ranks), so the benchmark never converts a model nothing else needs."""
    spec = care.get("decode_speed")
    if not spec:
        return
    if spec["method"] not in care["methods"]:
        raise ConfigError(
            f"config key 'care.decode_speed.method': {spec['method']!r} is not in care.methods"
        )
    width = kv_width(config, care["model"])
    ranks = resolve_ranks(spec["ranks"], width, "care.decode_speed.ranks")
    table = resolve_ranks(care["ranks"], width, "care.ranks")
    if not set(ranks) <= set(table):
        raise ConfigError(
            f"config key 'care.decode_speed.ranks': ranks {sorted(set(ranks) - set(table))} "
            f"are not among care.ranks {table}"
        )


def _check_heal_ablation(care: Mapping[str, Any]) -> None:
    """Ablation variants: known calibration sets, a reachable budget; every rank bound (heal,
    ablation, CARE-E water-filling) around the mean rank."""
    heal = care.get("heal") or {}
    ablation = heal.get("ablation")
    bounds = [("care.heal.rank_bounds", heal.get("rank_bounds")),
              ("care.waterfill_bounds", care.get("waterfill_bounds"))]  # fmt: skip
    for name, variant in ((ablation or {}).get("variants") or {}).items():
        key = f"care.heal.ablation.variants.{name}"
        if variant["calibration"] not in care["calibration"]["sets"]:
            raise ConfigError(
                f"config key '{key}.calibration': unknown calibration set "
                f"{variant['calibration']!r} (keys of care.calibration.sets)"
            )
        bounds.append((f"{key}.rank_bounds", variant["rank_bounds"]))
    for key, pair in bounds:
        if pair and not pair[0] <= 1 <= pair[1]:
            raise ConfigError(f"config key '{key}': [lo, hi] must hold 1 (lo <= 1 <= hi)")
    if ablation and ablation["reference"] not in ablation["variants"]:
        raise ConfigError(
            f"config key 'care.heal.ablation.reference': {ablation['reference']!r} is not a variant"
        )
    if ablation:
        from kvspec.care.budgets import budget_steps, tokens_per_step  # pure, no torch

        try:
            budget_steps([ablation["budget"]], tokens_per_step(heal["train"]))
        except ValueError as err:
            raise ConfigError(f"config key 'care.heal.ablation.budget': {err}") from err


def _check_heal_budgets(care: Mapping[str, Any]) -> None:
    """Every healing budget gets its own optimizer step (else two checkpoints would collide)."""
    train = (care.get("heal") or {}).get("train")
    if not train:
        return
    from kvspec.care.budgets import budget_steps, tokens_per_step  # pure, no torch

    try:
        budget_steps(train["budgets"], tokens_per_step(train))
    except ValueError as err:
        raise ConfigError(f"config key 'care.heal.train.budgets': {err}") from err
