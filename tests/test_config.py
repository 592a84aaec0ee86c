"""Config validation: every scale validates; bad keys, types and ranges name the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from kvspec.config import ConfigError, validate

from .conftest import REPO


@pytest.mark.parametrize("scale", ["config", "ci", "paper"])
def test_every_scale_validates_and_gets_defaults(scale: str, schema: dict) -> None:
    config = yaml.safe_load((REPO / "config" / f"{scale}.yaml").read_text())
    filled = validate(config, schema)
    assert filled["seed"] == config.get("seed", 0)
    for spec in filled["data"]["datasets"].values():
        assert "eval" in spec and "limit" in spec  # defaults were filled in
    target = filled["models"]["target"]
    assert sum(bool(target[k]) for k in ("pretrain", "hub", "gguf", "distil")) == 1


def test_input_is_not_mutated(mini_config: dict, schema: dict) -> None:
    before = copy.deepcopy(mini_config)
    validate(mini_config, schema)
    assert mini_config == before


def _set(cfg: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        cfg = cfg[p]
    cfg[last] = value


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("colour", 1, "colour"),  # unknown top-level key
        ("tokenizer.vocab_size", "big", "tokenizer.vocab_size"),  # wrong type
        ("tokenizer.vocab_size", 10, "tokenizer.vocab_size"),  # out of range
        ("models.target.pretrain.train.lr", -1.0, "models.target.pretrain.train.lr"),
        ("models.target.pretrain.arch.family", "gpt2", "models.target.pretrain.arch.family"),
        ("data.datasets.alpaca.kind", "images", "data.datasets.alpaca.kind"),
        ("data.datasets.alpaca.shuffle", True, "data.datasets.alpaca.shuffle"),
        ("seed", -3, "seed"),
        ("pipeline.pipeinfer.cutoff", 2.0, "pipeline.pipeinfer.cutoff"),  # a probability
        ("care.factorize.care_lambda", 1.5, "care.factorize.care_lambda"),
        ("sandbox.filesystem", "off", "sandbox.filesystem"),
        ("sampling.humaneval.problems", "all", "sampling.humaneval.problems"),
        ("sampling.pilot.samples", 0, "sampling.pilot.samples"),
        ("care.factorize.care_shrinkage", "ridge", "care.factorize.care_shrinkage"),
        ("care.heal.rank_bounds", [1.5, 2.0], "care.heal.rank_bounds"),
        ("care.waterfill_bounds", [0.5, 0.8], "care.waterfill_bounds"),
        ("care.heal.ablation.budget", 100, "care.heal.ablation.budget"),  # < one step
        ("care.heal.ablation.reference", "svd", "care.heal.ablation.reference"),
        (
            "care.heal.ablation.variants.care-none.calibration",
            "books",
            "care.heal.ablation.variants.care-none.calibration",
        ),
        (
            "care.heal.ablation.variants.care-bounded.rank_bounds",
            [0.5, 0.9],
            "care.heal.ablation.variants.care-bounded.rank_bounds",
        ),
    ],
)
def test_bad_value_names_the_key(
    ci_config: dict, schema: dict, key: str, value, named: str
) -> None:
    _set(ci_config, key, value)
    with pytest.raises(ConfigError, match=f"config key '{named}'"):
        validate(ci_config, schema)


def test_pilot_selection_needs_the_pilot(ci_config: dict, schema: dict) -> None:
    ci_config["sampling"]["pilot"] = None
    with pytest.raises(ConfigError, match="config key 'sampling.pilot'"):
        validate(ci_config, schema)


@pytest.mark.parametrize("where", [{"device": "cuda"}, {"dtype": "bfloat16"}])
def test_the_packed_engine_needs_float32_on_the_cpu(ci_config: dict, schema: dict,
                                                    where: dict) -> None:  # fmt: skip
    ci_config["resources"] |= {"linear": "packed", "draft_linear": None, **where}
    with pytest.raises(ConfigError, match="config key 'resources.linear': 'packed' needs"):
        validate(ci_config, schema)
    ci_config["resources"] |= {"linear": "torch", "draft_linear": "packed-bf16"}
    with pytest.raises(ConfigError, match="'resources.draft_linear': 'packed-bf16' needs"):
        validate(ci_config, schema)
    ci_config["resources"]["draft_linear"] = None  # null: the drafts take resources.linear
    validate(ci_config, schema)


def test_eval_split_may_not_enter_pretraining(ci_config: dict, schema: dict) -> None:
    ci_config["pretrain"]["sources"].append("wikitext2_test")
    with pytest.raises(ConfigError, match="wikitext2_test.*evaluation set"):
        validate(ci_config, schema)


def test_unknown_pretraining_source(ci_config: dict, schema: dict) -> None:
    ci_config["pretrain"]["sources"].append("nowhere")
    with pytest.raises(ConfigError, match="unknown dataset 'nowhere'"):
        validate(ci_config, schema)


def test_missing_mirror_directory(mini_config: dict, schema: dict, tmp_path) -> None:
    mini_config["data"]["mirror"] = str(tmp_path / "absent")
    with pytest.raises(ConfigError, match="data.mirror"):
        validate(mini_config, schema)


def test_dataset_must_be_loadable_from_somewhere(mini_config: dict, schema: dict, tmp_path) -> None:
    (tmp_path / "c4").mkdir()
    (tmp_path / "c4" / "docs.jsonl").write_text('{"text": "x"}\n')
    mini_config["data"]["mirror"] = str(tmp_path)
    for name, spec in mini_config["data"]["datasets"].items():
        if not spec.get("package"):
            spec["hub"] = spec.get("hub") or {"path": f"org/{name}", "split": "test"}
    c4 = mini_config["data"]["datasets"]["c4"]
    c4.update(mirror=["c4/docs.jsonl"], hub=None)
    validate(mini_config, schema)  # present in the mirror: fine without a hub id
    c4["mirror"] = ["c4/gone.jsonl"]
    with pytest.raises(ConfigError, match=r"data\.datasets\.c4.*c4/gone\.jsonl.*no hub"):
        validate(mini_config, schema)
    mini_config["data"]["mirror"] = None
    with pytest.raises(ConfigError, match=r"data\.datasets\.c4.*no hub id, package or mirror"):
        validate(mini_config, schema)


def test_model_needs_hub_or_pretrain(mini_config: dict, schema: dict) -> None:
    mini_config["models"]["draft"] = {}
    with pytest.raises(ConfigError, match="models.draft"):
        validate(mini_config, schema)


def test_mini_models_have_the_documented_shapes(mini_config: dict, schema: dict) -> None:
    """Packaged SmolLM2 (Llama GQA, 3 KV heads x 64) and Gemma-3-270m (1 x 256); drafts
    distilled from SmolLM2 (GQA too)."""
    models = validate(mini_config, schema)["models"]
    assert models["target"]["gguf"]["kv_width"] == 192
    assert models["target_alt"]["gguf"]["kv_width"] == 256
    for draft in ("draft", "draft_mid"):
        arch = models[draft]["distil"]["arch"]
        assert models[draft]["distil"]["teacher"] == "target" and arch["heads"] > arch["kv_heads"]


def test_key_order_does_not_matter(mini_config: dict, schema: dict) -> None:
    """Reordered keys give the identical (same-order) config, so no spurious reruns."""
    reordered = yaml.safe_load(yaml.safe_dump(mini_config, sort_keys=True))
    a, b = validate(mini_config, schema), validate(reordered, schema)
    assert repr(a) == repr(b)


PROBABILITY_WORDS = ("probability", "fraction", "share", "cutoff", "rate of", "top-p", "top_p")


def _number_keys(node: dict, path: str = ""):
    """(dotted key, schema node) of every number-valued key of the schema."""
    kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "number" in kinds:
        yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _number_keys(sub, f"{path}.{key}".lstrip("."))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _number_keys(extra, f"{path}.*")
    for sub in node.get("oneOf", []) + node.get("anyOf", []):
        yield from _number_keys(sub, path)


def test_every_probability_like_key_is_bounded(schema: dict) -> None:
    """A key the schema describes as a probability, fraction, share or cutoff has a maximum
    (`pipeline.pipeinfer.cutoff: 2.0` was once accepted)."""
    unbounded = [
        key for key, node in _number_keys(schema)
        if any(w in (node.get("description") or "").lower() for w in PROBABILITY_WORDS)
        and not {"maximum", "exclusiveMaximum"} & set(node)
    ]  # fmt: skip
    assert unbounded == []
