"""CARE config checks: ranks within [1, g_h·d_h], known datasets/columns; errors name the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from kvspec.config import ConfigError, kv_width, resolve_ranks, validate

from .conftest import REPO


@pytest.fixture(scope="module")
def ci() -> dict:
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())


def _fails(schema: dict, cfg: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(cfg, schema)


def test_every_scale_validates(schema) -> None:
    for name in ("ci", "config", "paper"):
        cfg = validate(yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text()), schema)
        assert cfg["care"]["methods"] and cfg["eval"]["tasks"]


def test_fractions_resolve_against_the_pretrain_arch(ci) -> None:
    assert kv_width(ci, "target") == 2 * (64 // 4)
    assert resolve_ranks({"fractions": [0.0625, 0.5, 1.0]}, 32, "k") == [2, 16, 32]
    assert resolve_ranks({"fractions": [0.5], "ranks": [7]}, 32, "k") == [7]  # explicit wins
    with pytest.raises(ConfigError, match="'k.fractions'.*explicit ranks"):
        resolve_ranks({"fractions": [0.5]}, None, "k")
    with pytest.raises(ConfigError, match="repeat"):
        resolve_ranks({"ranks": [4, 4]}, 32, "k")


def test_bad_care_values_name_the_key(schema, ci) -> None:
    cases = [
        (("care", "ranks"), {"ranks": [0]}, "care.ranks"),
        (("care", "ranks"), {"ranks": [33]}, "care.ranks"),
        (("care", "calibration", "default"), "nope", "care.calibration.default"),
        (("care", "calibration", "sets", "alpaca"), "mmlu", "care.calibration.sets.alpaca"),
        (("care", "table_3_4", "columns"), ["wiki", "hs"], "care.table_3_4.columns"),
        (("care", "figure_3_1", "layers"), [5], "care.figure_3_1.layers"),
        (("care", "model"), "ghost", "care.model"),
        (("care", "methods"), ["svd-uniform", "svd-uniform"], "care.methods"),
        (("eval", "tasks", "arc", "dataset"), "ghost", "eval.tasks.arc.dataset"),
    ]
    for path, value, key in cases:
        cfg = copy.deepcopy(ci)
        node = cfg
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        _fails(schema, cfg, key)


def test_hub_models_need_explicit_ranks(schema, ci) -> None:
    cfg = copy.deepcopy(ci)
    cfg["models"]["target_alt"] = {"hub": "org/model"}
    _fails(schema, cfg, "care.ranks.fractions")
    cfg["care"]["alt_model"] = None  # Table 3.2 off: target_alt is no longer converted
    _fails(schema, cfg, "care.decide.tables")  # ci's decide still names Table 3.2
    cfg["care"]["decide"]["tables"] = ["table_3_1"]
    validate(cfg, schema)


def test_heal_budgets_that_share_an_optimizer_step_are_refused(ci, schema) -> None:
    cfg = copy.deepcopy(ci)
    train = validate(cfg, schema)["care"]["heal"]["train"]
    step = train["seq_len"] * train["micro_batch"] * train["accum"] * train["processes"]
    cfg["care"]["heal"]["train"]["budgets"] = [4 * step, 4 * step + 1]
    with pytest.raises(ConfigError, match=r"care\.heal\.train\.budgets.*both round to"):
        validate(cfg, schema)
    cfg["care"]["heal"]["train"]["budgets"] = [4 * step, 5 * step]
    validate(cfg, schema)


def test_decode_speed_must_time_table_3_1_models(ci, schema) -> None:
    cfg = copy.deepcopy(ci)
    cfg["care"]["decode_speed"]["method"] = "care-uniform"
    _fails(schema, cfg, "care.decode_speed.method")
    cfg = copy.deepcopy(ci)
    cfg["care"]["decode_speed"]["ranks"] = {"ranks": [5]}  # care.ranks resolve to 4 and 32
    with pytest.raises(ConfigError, match=r"care\.decode_speed\.ranks.*\[5\]"):
        validate(cfg, schema)
